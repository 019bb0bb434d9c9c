"""Run every benchmark in this folder, one after the other, with its default settings.

`make bench` calls this. Each benchmark prints its own table with ratios against a baseline
measured in the same run; pass ``--quick`` to forward ``--quick`` to the benchmarks that have it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    failures = 0
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"\n=== {script.name} ===", flush=True)
        text = script.read_text()
        args = ["--quick"] if quick and "--quick" in text else []
        failures += subprocess.run([sys.executable, str(script), *args], cwd=HERE.parent).returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
