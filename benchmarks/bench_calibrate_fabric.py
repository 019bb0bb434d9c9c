"""How long ``flexcomm calibrate --cluster`` takes on a 31-row nccl-tests log, against the alpha-beta profile fit.

Why: calibration is meant to run on every log a user pastes (issue 43's target: under a second for a 31-row
log, deterministic). The fabric fit prices every row once through the NCCL model, then fits five parameters
in closed form; the baseline, measured in the same run on the same log, is ``flexcomm calibrate LOG`` without
``--cluster`` (robust least squares of one alpha and beta, :func:`costmodel.calibration.fit`).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_calibrate_fabric.py [--check]`` (``--check`` exits 1
when the median fabric fit takes a second or more, or two fits of the same log differ).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from _common import pin_one_cpu, require_flexcomm  # noqa: E402

require_flexcomm()

ROOT = Path(__file__).resolve().parents[1]
RUN = "together-h100-1n8g-allreduce-ring-nccl2262"  # 31 rows, 8 B to 8 GiB
LIMIT_S = 1.0


def _timed(function: object, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    pin_one_cpu()
    from flexcomm.costmodel.calibration import fit
    from flexcomm.costmodel.cluster import Cluster
    from flexcomm.costmodel.collective_libraries.fabric_fit import calibrate_fabric
    from flexcomm.costmodel.collective_libraries.logs import read_nccl_tests, to_measurements

    corpus = ROOT / "validation" / "nccl-tests"
    log = read_nccl_tests(str(corpus / f"{RUN}.txt"))
    cluster = Cluster.from_file(corpus / "clusters" / f"{RUN}.yaml")
    table = to_measurements(log)
    cold_s, _ = _timed(lambda: calibrate_fabric(cluster, [log]), 1)  # NCCL's tuner tables built on the way
    fabric_s, first = _timed(lambda: calibrate_fabric(cluster, [log]), args.repeats)
    again = calibrate_fabric(cluster, [log])
    baseline_s, _ = _timed(lambda: fit(table), args.repeats)
    same = first.calibration == again.calibration  # type: ignore[attr-defined]
    print(f"log: {RUN} ({len(log.rows)} rows)")
    print(f"{'fit':<46s} {'median s':>9s} {'ratio':>7s}")
    print(f"{'alpha-beta profile (calibrate LOG, baseline)':<46s} {baseline_s:9.4f} {1.0:7.2f}")
    print(f"{'NCCL fabric (calibrate --cluster C LOG)':<46s} {fabric_s:9.4f} {fabric_s / baseline_s:7.2f}")
    print(f"{'NCCL fabric, first fit in the process':<46s} {cold_s:9.4f} {cold_s / baseline_s:7.2f}")
    print(f"deterministic (two fits equal): {same}; target: under {LIMIT_S:g} s")
    if args.check and (max(fabric_s, cold_s) >= LIMIT_S or not same):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
