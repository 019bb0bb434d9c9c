"""Defaults of ``flexcomm validate`` (:mod:`real_backend.validate`), kept free of heavy imports.

Why: the CLI lists them in ``--help`` at start-up, which must not import torch.
"""

VALIDATE_SIZES = "4KiB:16MiB"
VALIDATE_STRATEGIES = "builtin,dense,fp16,topk-ag,topk-ar,powersgd"
