"""``python -m flexcomm.experiments.commands.gpu_topk --out results/gpu_check/topk.json``: Top-k selection and
compressor timings on a CUDA device, one line per row as it is measured, the whole as JSON.

Why an entry module and not a ``flexcomm`` sub-command: it is one step of ``real_backend/gpu_check.sh`` on a lent
GPU, and it imports torch, which ``flexcomm``'s start must not. The engine is :mod:`flexcomm.real_backend.gpu_topk`.
Exit 0, 2 for a bad count, 69 (EX_UNAVAILABLE) when CUDA is asked for and there is none.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend import gpu_topk

#: sysexits.h EX_UNAVAILABLE: the GPU check tells "no CUDA here, nothing was run" from a failed step by it.
EXIT_NO_CUDA = 69


def selection_line(row: dict[str, Any]) -> str:
    """One size and ratio: each selection method's median and Top-k's rate."""
    n = row["numel"]
    return (f"n={n:>11,} ratio={row['ratio']:<6} topk {row['topk_s'] * 1e3:8.3f} ms  kthvalue "
            f"{row['kthvalue_s'] * 1e3:8.3f} ms  sampled {row['sampled_s'] * 1e3:8.3f} ms  read "
            f"{row['read_s'] * 1e3:7.3f} ms  ({n / row['topk_s'] / 1e9:.2f} G elements/s by topk)")


def exchange_line(row: dict[str, Any]) -> str:
    """One compressor's exchange and its compression critical path."""
    return (f"{row['scheme']:<10} exchange {row['exchange_s'] * 1e3:8.3f} ms  compress {row['compress_s'] * 1e3:8.3f} "
            f"ms  decompress {row['decompress_s'] * 1e3:8.3f} ms")


def _print(line: str) -> None:
    print(line, flush=True)  # the GPU check's step log shows how far a step got when its time limit strikes


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, time both parts, print each row and write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m flexcomm.experiments.commands.gpu_topk",
                                     description=gpu_topk.__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(gpu_topk.DEFAULT_SIZES))
    parser.add_argument("--ratios", type=float, nargs="*", default=list(gpu_topk.DEFAULT_RATIOS))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4, help="emulated workers in part 2 (default 4)")
    parser.add_argument("--numel", type=int, default=11_689_512, help="gradient size in part 2 (ResNet-18)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    try:
        device = gpu_topk.cuda_device(args.device)
        gpu_topk.check_counts(args.sizes, args.repeats, args.workers, args.numel)
    except gpu_topk.NoCudaError as error:
        print(f"gpu_topk: {error}", file=sys.stderr)
        return EXIT_NO_CUDA
    except InputError as error:
        print(f"gpu_topk: {error}", file=sys.stderr)
        return 2
    _print(f"# gpu_topk on {gpu_topk.device_name(device)}, torch {torch.__version__}")
    result = gpu_topk.measure(device, args.sizes, args.ratios, args.repeats, args.workers, args.numel,
                              on_selection=lambda row: _print(selection_line(row)),
                              on_exchange=lambda row: _print(exchange_line(row)))
    if args.out is not None:
        write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
