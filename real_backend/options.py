"""Strategy names of the DDP hooks and defaults of ``flexcomm validate``, kept free of heavy imports.

Why: the CLI lists them in ``--help`` at start-up, which must not import torch, and ``train-ddp`` checks
``--strategy`` before it imports torch (:mod:`real_backend.hooks` uses these tuples).
"""

VALIDATE_SIZES = "4KiB:16MiB"
VALIDATE_STRATEGIES = "builtin,dense,fp16,topk-ag,topk-ar,powersgd"

#: Every strategy :func:`real_backend.hooks.register` accepts.
HOOK_STRATEGIES = (
    "builtin", "dense", "fp16", "bf16", "topk-ag", "topk-ar", "topk-ar-var", "topk-ar-sketch", "randomk",
    "threshold", "powersgd", "flexible", "moo",
)
#: Strategies whose size is set by a ratio (fraction of elements kept).
HOOK_RATIO_STRATEGIES = frozenset({"topk-ag", "topk-ar", "topk-ar-var", "topk-ar-sketch", "randomk", "threshold",
                                   "flexible", "moo"})
