"""Option names the CLI lists in ``--help``, kept free of heavy imports.

Why: every ``flexcomm`` command registers its parser at start-up; importing torch-backed modules for
their option lists cost every command (even ``flexcomm clusters``) seconds. The modules that use these
names import them from here, so each list is still written once.
"""

#: Emulated-training strategies, network schedules and compression-time modes (:mod:`experiments.emulated`).
EMULATION_STRATEGIES = ("dense", "topk-ag", "topk-ar", "flexible", "moo")
EMULATION_NETWORKS = ("static", "c1", "c2")
COMPRESS_TIME_MODES = ("model", "measured", "none")
#: Rules that pick the operating point on a Pareto front (:func:`compression.moo.choose_point`).
MOO_RULES = ("asf", "knee", "utopia")
#: ``flexcomm validate`` defaults (:mod:`real_backend.validate`).
VALIDATE_SIZES = "4KiB:16MiB"
VALIDATE_STRATEGIES = "builtin,dense,fp16,topk-ag,topk-ar,powersgd"
