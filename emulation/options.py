"""Option names of emulated training, kept free of heavy imports.

Why: every ``flexcomm`` command registers its parser at start-up, and listing these choices must not
import torch. The engine (:mod:`emulation.engine`) validates against the same tuples.
"""

#: Emulated-training strategies, network schedules and compression-time modes.
EMULATION_STRATEGIES = ("dense", "topk-ag", "topk-ar", "flexible", "moo")
EMULATION_NETWORKS = ("static", "c1", "c2")
COMPRESS_TIME_MODES = ("model", "measured", "none")
#: Learning-rate schedules: constant, or cosine decay to 0 over the run (SGDR without restarts,
#: Loshchilov & Hutter 2017), the standard recipe that lets a short run settle instead of oscillating.
LR_SCHEDULES = ("constant", "cosine")
