"""``python -m flexcomm.experiments.commands.gpu_compute --out gpu_compute.csv``: one GPU checks the compute
model (GEMMs, a transformer layer, compression kernels, workload steps) against the engines' predictions.

Why an entry module and not a ``flexcomm`` sub-command: it is one step of ``real_backend/gpu_check.sh`` on a lent
GPU, and it imports torch, which ``flexcomm``'s start must not. The engine is
:mod:`flexcomm.real_backend.gpu_compute`; this module parses the flags, prints each row and rewrites the CSV after
every section. Exit 0, 2 for a bad section or count, 69 (EX_UNAVAILABLE) when CUDA is asked for and there is none.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from flexcomm.costmodel.atomic import write_csv_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.commands.gpu_topk import EXIT_NO_CUDA
from flexcomm.real_backend import gpu_compute
from flexcomm.real_backend.gpu_topk import NoCudaError, cuda_device


def row_line(section: str, row: dict[str, Any]) -> str:
    """One measured case, with its prediction and error where the catalog knows the device."""
    predicted = ("" if row["predicted_s"] is None
                 else f" predicted {row['predicted_s'] * 1e3:9.3f} ms ({row['rel_error']:+.1%})")
    return f"{section:<11} {row['case']:<40} measured {row['measured_s'] * 1e3:9.3f} ms{predicted}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m flexcomm.experiments.commands.gpu_compute",
                                     description=gpu_compute.__doc__.splitlines()[0])
    sections = gpu_compute.SECTIONS
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu (the rehearsal)")
    parser.add_argument("--device-name", help="the catalog device to predict for (default: the GPU's own name)")
    parser.add_argument("--sections", default=",".join(sections), help="comma-separated: " + ", ".join(sections))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="small shapes (the CPU rehearsal)")
    parser.add_argument("--out", type=Path, required=True, help="CSV of every measured row (written as it grows)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, run the sections, print each row and keep the CSV up to date."""
    args = _parser().parse_args(argv)
    try:
        device = cuda_device(args.device)
        sections = gpu_compute.section_names(args.sections, args.repeats)
    except NoCudaError as error:
        print(f"gpu_compute: {error}", file=sys.stderr)
        return EXIT_NO_CUDA
    except InputError as error:
        print(f"gpu_compute: {error}", file=sys.stderr)
        return 2
    ctx = gpu_compute.Context(device, args.device_name, args.quick, args.repeats)
    print(f"# gpu_compute on {ctx.name} (catalog: {ctx.catalog or 'none: no predictions'}), torch "
          f"{ctx.software['torch']}", flush=True)
    rows: list[dict[str, Any]] = []
    for found in gpu_compute.run_sections(ctx, sections):
        rows += found.rows
        write_csv_atomic(pd.DataFrame(rows, columns=list(gpu_compute.COLUMNS)), args.out)
        for row in found.rows:
            print(row_line(found.section, row), flush=True)
        print(f"# {found.section}: {len(found.rows)} rows in {found.seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
