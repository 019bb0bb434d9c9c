"""Option names the CLI lists in ``--help`` whose owners import torch.

Why: every ``flexcomm`` command registers its parser at start-up; importing torch-backed modules for
their option lists cost every command (even ``flexcomm clusters``) seconds. A test keeps each mirror equal
to its owner. (Torch-free owners keep their own lists: :mod:`emulation.options`, :mod:`real_backend.options`.)
"""

#: Rules that pick the operating point on a Pareto front (:data:`compression.moo.RULES`).
MOO_RULES = ("asf", "knee", "utopia")
#: Operator graphs the planner and the placer trace (:data:`planner.graphs.GRAPH_NAMES`).
GRAPH_NAMES = ("resnet18", "resnet50", "eca-resnet50", "eca-resnet20", "gpt", "inception")
