"""Option names of emulated training, kept free of heavy imports.

Why: every ``flexcomm`` command registers its parser at start-up, and listing these choices must not
import torch. The engine (:mod:`emulation.engine`) validates against the same tuples.
"""

#: Emulated-training strategies, network schedules and compression-time modes.
EMULATION_STRATEGIES = ("dense", "topk-ag", "topk-ar", "flexible", "moo")
EMULATION_NETWORKS = ("static", "c1", "c2")
COMPRESS_TIME_MODES = ("model", "measured", "none")
