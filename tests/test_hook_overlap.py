"""Hooks that overlap backward: a hook returns before its bucket is exchanged, the results equal the blocking
hook's bitwise, every rank issues the same collectives in the same order, and an exchange's error reaches the
trainer instead of hanging it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from flexcomm.real_backend.comm_thread import CommThread
from flexcomm.real_backend.launch import launch

WORKER = """
    import gc, json, sys, time
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from flexcomm.real_backend.dist import init_from_env, shutdown
    from flexcomm.real_backend import hooks

    info = init_from_env(timeout_s=60)
    out = {}
    for strategy in ("dense", "topk-ag", "topk-ar", "flexible", "powersgd"):
        for overlap in (False, True):
            torch.manual_seed(0)
            model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)])
            ddp = DDP(model, bucket_cap_mb=0.3)  # several buckets
            ratio = 0.25 if strategy in ("topk-ag", "topk-ar", "flexible") else None
            pending = []
            chained = hooks.chained_dense_hook
            if overlap and strategy == "dense":  # dense chains futures without the thread: spy on its hook

                def spy_hook(state, bucket, chained=chained):
                    future = chained(state, bucket)
                    pending.append(future.done())
                    return future

                hooks.chained_dense_hook = spy_hook
            state = hooks.register(ddp, strategy, ratio, cost_model=hooks.default_cost_model(), overlap=overlap)
            hooks.chained_dense_hook = chained
            if overlap and state.engine is not None:
                submit = state.engine.submit

                def spy(job, device, after=None, submit=submit):
                    future = submit(job, device, after=after)
                    pending.append(future.done())
                    return future

                state.engine.submit = spy
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            g = torch.Generator().manual_seed(info.rank)
            losses = []
            for _ in range(4):
                x = torch.randn(32, 256, generator=g)
                loss = ddp(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(repr(float(loss)))
            steps = state.take_steps()
            state.close()
            del ddp, model, opt  # before the group goes: see hooks.chained_dense_hook
            gc.collect()
            out[f"{strategy}/{overlap}"] = {"losses": losses, "not_done_at_return": sum(not d for d in pending),
                                             "hooks": len(pending), "steps": len(steps),
                                             "buckets": [s.buckets for s in steps]}
    open(sys.argv[1] + f"/rank{info.rank}.json", "w").write(json.dumps(out))
    shutdown()
"""


@pytest.mark.timeout(180)
def test_overlapping_hooks_return_at_once_and_equal_the_blocking_ones(tmp_path: Path) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent(WORKER), encoding="utf-8")
    result = launch([str(worker), str(tmp_path)], 2, timeout_s=170, log_dir=tmp_path / "logs")
    logs = "".join(p.read_text() for p in sorted((tmp_path / "logs").glob("*.log")))
    assert result.returncode == 0, logs
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for strategy in ("dense", "topk-ag", "topk-ar", "flexible", "powersgd"):
        for data in ranks:
            blocking, overlapped = data[f"{strategy}/False"], data[f"{strategy}/True"]
            assert overlapped["losses"] == blocking["losses"], strategy  # the same exchanges, bitwise
            assert overlapped["hooks"] > 4 * 2  # several buckets per step
            assert overlapped["not_done_at_return"] > 0, strategy  # returned before the bytes moved
            assert overlapped["steps"] == blocking["steps"] == 4, strategy  # every iteration summarised once
            assert overlapped["buckets"] == blocking["buckets"], strategy


def test_an_exchange_error_reaches_the_caller_through_the_future() -> None:
    thread = CommThread()
    try:
        def fail() -> torch.Tensor:
            raise RuntimeError("mismatched collective")

        future = thread.submit(fail, torch.device("cpu"))
        with pytest.raises(RuntimeError, match="mismatched collective"):
            future.wait()
        ok = thread.submit(lambda: torch.ones(3), torch.device("cpu"))  # the thread survives an error
        assert ok.wait().tolist() == [1.0, 1.0, 1.0]
        assert thread.take_busy() >= 0.0
    finally:
        thread.close()
