"""How long ``flexcomm simulate --from-trace DIR`` takes to read and replay a directory of one GPU trace per rank,
against parsing the same bytes with the standard library's ``json`` (the floor any reader pays).

Why: issue 47's target is a 128-rank directory (tens of MB a rank) read in under a minute with bounded memory.
The ranks here are copies of one public trace (validation/gpu-traces, 8 A100s, ~35 MB of JSON a rank) with
their ``distributedInfo.rank`` rewritten, written once to a temporary folder; the replay reads them in worker
processes, one trace in memory per worker.

Run: ``.venv/bin/python benchmarks/bench_gpu_job.py [--ranks 128]`` (default 16 ranks; prints seconds, MB/s and
the ratio to ``json.load`` of the same files in this run).
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import tempfile
import time
from pathlib import Path

from _common import require_flexcomm

require_flexcomm()

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "validation" / "gpu-traces" / "hta__trace_diff_control_a100x8_rank3.json.gz"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16)
    args = parser.parse_args()
    from flexcomm.sim.gpu_job import Settings, replay_job

    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    with tempfile.TemporaryDirectory() as folder:
        total = 0
        for rank in range(args.ranks):
            doc["distributedInfo"].update(rank=rank, world_size=args.ranks)
            raw = json.dumps(doc).encode()
            total += len(raw)
            (Path(folder) / f"rank{rank}.json.gz").write_bytes(gzip.compress(raw, 1))
        t0 = time.perf_counter()
        for path in sorted(Path(folder).iterdir()):
            json.loads(gzip.decompress(path.read_bytes()))
        baseline = time.perf_counter() - t0
        t0 = time.perf_counter()
        job = replay_job([folder], Settings(), progress=False)
        elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"{args.ranks} ranks, {total / 1e6:,.0f} MB of JSON: replay_job {elapsed:.1f} s ({total / 1e6 / elapsed:.0f} "
          f"MB/s), json.load alone {baseline:.1f} s (one process): ratio {elapsed / baseline:.2f}; job step "
          f"{job.job_step_s('measured') * 1e3:.1f} ms; peak memory {peak:.0f} MB here, {children:.0f} MB a worker")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
