"""How fast is the controller's environment, and what does wrapping emulated training in it cost?

Why: PPO needs thousands of env steps; each one is ``interval`` real training iterations. The baseline,
measured in the same run, is the same number of iterations of a plain :class:`EmulatedRun` (strategy
``flexible``: the same compressor, estimator and clock), so the ratio says what the env adds (observation,
reward, the per-interval RNG isolation) on top of the training it must do anyway.

Rows: ``env`` (random actions, resets included), ``emulated`` (the baseline) and ``env/emulated``;
env steps/s and training iterations/s, median of ``--repeats`` timed episodes.

Run: ``.venv/bin/python benchmarks/bench_controller.py [--episodes 3] [--repeats 3] [--json PATH]``.
One thread (``torch.set_num_threads(1)``), pinned to one CPU (``--no-pin`` to skip).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _common import pin_one_cpu, require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()
from flexcomm.controller.env import CompressionEnv, EnvConfig  # noqa: E402
from flexcomm.controller.traces import TraceClock, paper_trace  # noqa: E402
from flexcomm.emulation.engine import EmulatedRun  # noqa: E402


def env_episode(env: CompressionEnv, seed: int) -> float:
    """Seconds of one episode with seeded random actions (reset included)."""
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    env.reset(seed=seed)
    done = False
    while not done:
        _, _, done, _, _ = env.step(rng.uniform(-1, 1, 2).astype(np.float32))
    return time.perf_counter() - start


def emulated_episode(config: EnvConfig, seed: int) -> float:
    """Seconds of the same number of iterations of a plain EmulatedRun (construction included)."""
    start = time.perf_counter()
    emu = config.emulation(seed)
    run = EmulatedRun(emu)
    run.clock = TraceClock(paper_trace("c1"), emu.steps, run.price_scale)
    run.run()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed episodes per row (default 3)")
    parser.add_argument("--episode-iters", type=int, default=300, help="iterations per episode (default 300)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--no-pin", action="store_true", help="do not pin to one CPU")
    args = parser.parse_args()
    cpu = None if args.no_pin else pin_one_cpu()
    torch.set_num_threads(1)
    config = EnvConfig(episode_iters=args.episode_iters)
    env = CompressionEnv(config, [paper_trace("c1")])
    env_episode(env, 0)  # warm-up: data, caches
    env_s = statistics.median(env_episode(env, s) for s in range(1, args.repeats + 1))
    emu_s = statistics.median(emulated_episode(config, s) for s in range(1, args.repeats + 1))
    steps = config.episode_iters // config.interval
    rows = [
        {"row": "env", "episode_s": env_s, "env_steps_per_s": steps / env_s,
         "iterations_per_s": config.episode_iters / env_s},
        {"row": "emulated", "episode_s": emu_s, "env_steps_per_s": steps / emu_s,
         "iterations_per_s": config.episode_iters / emu_s},
    ]
    print(f"{config.workload}, {config.workers} workers, {config.episode_iters} iterations/episode, "
          f"interval {config.interval}; pinned CPU {cpu}")
    print(f"{'row':10s} {'episode s':>10s} {'env steps/s':>12s} {'iterations/s':>13s}")
    for r in rows:
        print(f"{r['row']:10s} {r['episode_s']:10.3f} {r['env_steps_per_s']:12.1f} {r['iterations_per_s']:13.1f}")
    print(f"env/emulated time ratio: {env_s / emu_s:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "ratio": env_s / emu_s, "cpu": cpu}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
