"""TorchDistCommunicator for real: 2 gloo processes on loopback give the LocalCommunicator's aggregates.

One spawn runs every check (process start-up dominates): topk-ag, topk-ar (star and var) and threshold
must match the emulation bitwise (integer-valued gradients make every sum exact whatever the reduction
order), with the same payload records; ``powersgd`` must match torch's own ``powerSGD_hook`` run on
the same ranks, and the emulation to float tolerance; an allgather where one rank sends nothing must
not hang.
"""

from __future__ import annotations

import datetime
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from flexcomm.compression import LocalCommunicator, TorchDistCommunicator, make_compressor

WORLD = 2
STEPS = 4
SHAPES = [(12, 16), (48,)]  # a matrix PowerSGD compresses and a bias it allreduces as is
NUMEL = 12 * 16 + 48
SCHEMES = {
    "topk-ag": ("topk-ag", 0.1, {}),
    "topk-ar-star": ("topk-ar", 0.1, {"owner": "star"}),
    "topk-ar-var": ("topk-ar", 0.1, {"owner": "var"}),
    "threshold": ("threshold", 0.1, {"sample_ratio": 0.25, "min_sample": 50}),
    "powersgd": ("powersgd", None, {"shapes": SHAPES, "rank": 2, "start_iter": 2}),
}


def integer_grads(step: int) -> list[torch.Tensor]:
    """Distinct magnitudes (no top-k ties), small integers (exact sums in any order)."""
    out = []
    for rank in range(WORLD):
        gen = torch.Generator().manual_seed(1000 * step + rank)
        magnitude = (torch.randperm(NUMEL, generator=gen) + 1).float()
        sign = torch.randint(0, 2, (NUMEL,), generator=gen).float() * 2 - 1
        out.append(magnitude * sign * (1 + (step + rank) % 2))  # the larger norm alternates: VAR moves
    return out


def run_schemes(comm: object, ranks: list[int]) -> dict[str, list]:
    """Per scheme and step: the aggregates of the local ranks and the payload records."""
    results: dict[str, list] = {}
    for label, (name, ratio, opts) in SCHEMES.items():
        comp = make_compressor(name, ratio, gain_every=1, **opts)  # measure the gain on both engines
        steps = []
        for step in range(STEPS):
            grads = integer_grads(step)
            res = comp.exchange([grads[r] for r in ranks], comm)
            records = [(r.collective, r.nbytes, r.purpose) for r in res.stats.collectives + res.stats.overhead]
            steps.append((res.aggregates, records, res.stats.owner))
        results[label] = steps
    return results


class FakeBucket:
    """The four GradBucket methods torch's powerSGD_hook calls, over one flat buffer."""

    def __init__(self, buffer: torch.Tensor) -> None:
        self._buffer = buffer
        self._grads, offset = [], 0
        for shape in SHAPES:
            size = torch.Size(shape).numel()
            self._grads.append(buffer[offset: offset + size].view(shape))
            offset += size

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def index(self) -> int:
        return 0

    def gradients(self) -> list[torch.Tensor]:
        return self._grads

    def is_last(self) -> bool:
        return True


def _worker(rank: int, port: int, out_dir: str) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    try:
        comm = TorchDistCommunicator(validate=True)
        out = {"rank": comm.rank, "local": comm.local_workers, "schemes": run_schemes(comm, [rank])}
        state = PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2,
                              min_compression_rate=2, use_error_feedback=True, warm_start=True, random_seed=0)
        hook = []
        for step in range(STEPS):
            hook.append(powerSGD_hook(state, FakeBucket(integer_grads(step)[rank].clone())).wait().clone())
        out["hook"] = hook
        gathered = comm.allgather([torch.arange(rank, dtype=torch.float32)], same_size=False)[0]
        out["ragged"] = [t.tolist() for t in gathered]
        nothing = comm.allgather([torch.empty(0)], same_size=False)[0]
        out["empty"] = [t.numel() for t in nothing]
        torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(180)
def test_gloo_two_ranks_match_emulation(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    real = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    emulated = run_schemes(LocalCommunicator(WORLD), list(range(WORLD)))

    for rank, out in enumerate(real):
        assert out["rank"] == rank and out["local"] == [rank]
        assert out["ragged"] == [[], [0.0]]
        assert out["empty"] == [0, 0]
        for label in ("topk-ag", "topk-ar-star", "topk-ar-var", "threshold"):
            for step in range(STEPS):
                (agg,), records, owner = out["schemes"][label][step]
                local_aggs, local_records, local_owner = emulated[label][step]
                assert torch.equal(agg, local_aggs[rank]), (label, step, rank)
                assert owner == local_owner
                # validate=True adds an allgather of 10 int64 (shape, dtype) per call, as control traffic
                assert [r for r in records if r != ("allgather", 80, "control")] == local_records
        for step in range(STEPS):
            (agg,), _, _ = out["schemes"]["powersgd"][step]
            assert torch.equal(agg, out["hook"][step]), ("powersgd vs torch hook", step, rank)
            assert torch.allclose(agg, emulated["powersgd"][step][0][rank], rtol=1e-5, atol=1e-3)
    assert {emulated["topk-ar-var"][s][2] for s in range(STEPS)} == {0, 1}  # VAR followed the larger norm
