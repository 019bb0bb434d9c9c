"""How quickly does every known bad input fail, next to the CLI's own start-up measured in the same run?

Why: the issue that bounded them asked for "a one-line error within a second": an alias bomb or a cluster of
10^9 nodes must be refused before any work sized by it starts. The cases are those of
``tests/test_robustness.py`` (which checks one line, exit 2 and peak memory, and asserts no time); here each
runs ``--repeats`` times in a fresh interpreter and its median wall time is printed with its ratio to
``flexcomm clusters`` (the start-up every command pays: Python, argparse, the cost model's imports).

Run: ``.venv/bin/python benchmarks/bench_bad_inputs.py [--repeats 3] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "flexcomm.experiments.cli"]


def _cases() -> tuple[list[tuple[list[str], str]], dict[str, str]]:
    spec = importlib.util.spec_from_file_location("test_robustness", ROOT / "tests" / "test_robustness.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)  # the test module defines the cases; importing it runs no test
    return module.CASES, module.FILES


def _seconds(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run([*CLI, *argv], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          timeout=120)
    return time.perf_counter() - start, proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the table here")
    args = parser.parse_args(argv)
    cases, files = _cases()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, text in files.items():
            Path(folder, name).write_text(text)
        baseline = statistics.median(_seconds(["clusters"])[0] for _ in range(args.repeats))
        print(f"baseline `flexcomm clusters`: {baseline:.2f} s (median of {args.repeats})")
        print(f"{'case':70s} {'median s':>9s} {'x start-up':>10s} {'exit':>4s}")
        for case, _ in cases:
            run = [a.replace("{dir}", folder) for a in case]
            timings = [_seconds(run) for _ in range(args.repeats)]
            median = statistics.median(t for t, _ in timings)
            code = timings[-1][1]
            label = " ".join(case).replace("{dir}/", "")
            rows.append({"case": label, "median_s": median, "ratio_to_startup": median / baseline, "exit": code})
            print(f"{label[:70]:70s} {median:9.2f} {median / baseline:10.2f} {code:4d}")
    worst = max(rows, key=lambda r: r["median_s"])
    print(f"slowest: {worst['case']} at {worst['median_s']:.2f} s ({worst['ratio_to_startup']:.2f}x start-up); "
          f"{sum(r['median_s'] <= 1.0 for r in rows)} of {len(rows)} cases within 1 s")
    if args.json:
        Path(args.json).write_text(json.dumps({"baseline_s": baseline, "cases": rows}, indent=2) + "\n")
    return 0 if all(r["exit"] == 2 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
