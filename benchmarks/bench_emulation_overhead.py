"""What emulating N workers in one process costs over plain PyTorch doing the same arithmetic.

Why: ``train-emulated`` runs N logical workers' forward and backward passes in one process and adds the
gradient exchange through the real compressors and the simulated clock. Its overhead is the price of
emulation over the training it stands for; the issue's goal is at most 1.3x for dense with 4 workers.

Baseline (measured in the same run): plain single-process PyTorch on the same model and per-worker batch,
N micro-batches per step with gradient accumulation into one optimizer step (the same samples, FLOPs and
optimizer work as one emulated dense step), from the same shards. Both sides: ``--steps`` steps after a
warm-up, median over ``--repeats``; the emulated run is built before the clock starts (data, model and
compressor set-up are not the steady state) and evaluates once at the end, so the baseline does too.

Run: ``.venv/bin/python benchmarks/bench_emulation_overhead.py [--workload fashion-cnn] [--steps 40]
[--repeats 3] [--check]`` (``--check``: exit 1 if dense is above 1.3x). Fashion-MNIST workloads need
``make data``; without it the script says so and uses ``--workload resnet-digits``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from _common import require_flexcomm  # noqa: E402

require_flexcomm()
import torch  # noqa: E402

from flexcomm.emulation.config import EmulationConfig  # noqa: E402
from flexcomm.emulation.engine import EmulatedRun, ShardedBatches  # noqa: E402
from flexcomm.workloads.data import fashion_mnist_dir  # noqa: E402
from flexcomm.workloads.registry import get_workload  # noqa: E402
from flexcomm.workloads.training import evaluate  # noqa: E402

GOAL = 1.3


def _plain(workload_name: str, workers: int, steps: int, seed: int) -> float:
    """Seconds for ``steps`` accumulated-gradient steps of plain PyTorch, plus one evaluation."""
    workload = get_workload(workload_name, seed=seed)
    model = workload.build_model(seed)
    optimizer = workload.make_optimizer(model)
    data = ShardedBatches(workload.train_set, workers, workload.batch_size, seed)
    torch.manual_seed(seed)
    for step in range(2):  # warm-up, as the emulated side gets
        _plain_step(model, optimizer, workload, data, workers, step)
    started = time.perf_counter()
    for step in range(steps):
        _plain_step(model, optimizer, workload, data, workers, step + 2)
    evaluate(model, workload.test_set, workload.loss_fn)
    return time.perf_counter() - started


def _plain_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, workload, data: ShardedBatches,
                workers: int, step: int) -> None:
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for rank in range(workers):
        inputs, targets = data.batch(rank, step)
        (workload.loss_fn(model(inputs), targets) / workers).backward()
    optimizer.step()


def _emulated(workload_name: str, strategy: str, workers: int, steps: int, seed: int) -> float:
    config = EmulationConfig(workload=workload_name, workers=workers, strategy=strategy, steps=steps + 2,
                             seed=seed, eval_every=10**9, compress_time="model")
    run = EmulatedRun(config)
    run.workload.datasets()  # data built before the clock starts
    started = time.perf_counter()
    run.run()
    elapsed = time.perf_counter() - started
    return elapsed * steps / (steps + 2)  # the 2 extra steps stand for the baseline's warm-up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="fashion-cnn")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check", action="store_true", help=f"exit 1 if dense is above {GOAL:g}x")
    args = parser.parse_args(argv)
    workload = args.workload
    if workload.startswith("fashion") and not (fashion_mnist_dir() / "train-images-idx3-ubyte.gz").is_file():
        print(f"Fashion-MNIST not installed (make data); using resnet-digits instead of {workload}")
        workload = "resnet-digits"
    print(f"{workload}, {args.workers} workers, {args.steps} steps, median of {args.repeats}")
    plain = statistics.median(_plain(workload, args.workers, args.steps, seed) for seed in range(args.repeats))
    print(f"{'plain PyTorch':14s} {plain / args.steps * 1e3:8.2f} ms/step  1.00x (baseline)")
    ratios = {}
    for strategy in ("dense", "topk-ar"):
        emulated = statistics.median(_emulated(workload, strategy, args.workers, args.steps, seed)
                                     for seed in range(args.repeats))
        ratios[strategy] = emulated / plain
        print(f"{'emulated ' + strategy:14s} {emulated / args.steps * 1e3:8.2f} ms/step  {ratios[strategy]:.2f}x")
    print(f"goal: dense <= {GOAL:g}x: {'met' if ratios['dense'] <= GOAL else 'missed'}")
    return 1 if args.check and ratios["dense"] > GOAL else 0


if __name__ == "__main__":
    sys.exit(main())
