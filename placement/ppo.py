"""A grouper-placer policy trained with PPO against the simulator (EAGLE-style, end to end).

* **Op embeddings**: per-op features (log FLOPs, parameter and activation bytes, topological
  position, longest path to the end forward and backward, degrees, a hashed op kind), then two
  rounds of message passing over predecessors and successors (a small graph neural network), so
  the same weights apply to any graph.
* **Grouper**: a softmax over ``groups`` per op; each op samples its group. It starts (a hundred
  supervised steps) at contiguous segments of a branch-keeping topological order, so the first
  placements cut the graph in few places; PPO then moves ops between groups.
* **Placer**: each group's embedding (mean of its ops' embeddings, its share of ops and compute)
  gives a softmax over devices; each group samples its device. Op -> device[group[op]].
* **Training**: the reward of a placement is ``-log(step time / reference)`` (the reference is the
  single-device time; the memory penalty of the simulator makes infeasible placements costly); the
  advantage is the reward minus the batch mean, over the batch standard deviation. PPO with the
  clipped ratio per decision (every op's group choice and every group's device choice shares the
  placement's advantage), a few epochs per batch, an entropy bonus. Grouper and placer are one
  network trained jointly, as in EAGLE.

The result is the best placement sampled during training (what a placement search delivers) and
the curve of best step time against wall time. With a seed, training is deterministic.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from flexcomm.costmodel.errors import InputError
from flexcomm.placement.baselines import dfs_order, single
from flexcomm.placement.es import SearchResult
from flexcomm.placement.simulator import PlacementProblem

KIND_BUCKETS = 8


def op_features(problem: PlacementProblem) -> np.ndarray:
    """Standardised per-op features, shape (ops, features)."""
    g, n = problem.graph, len(problem.nodes)
    rows = []
    total = max(float(problem.fwd_level.max()), 1e-30)
    for i, v in enumerate(problem.nodes):
        data = g.nodes[v]
        kind = np.zeros(KIND_BUCKETS)
        kind[zlib.crc32(str(data.get("kind", "")).encode()) % KIND_BUCKETS] = 1.0
        rows.append([
            math.log1p(float(data.get("flops", 0.0))),
            math.log1p(float(data.get("param_bytes", 0.0))),
            math.log1p(float(data.get("activation_bytes", 0.0))),
            i / max(n - 1, 1),
            problem.fwd_level[i] / total,
            problem.bwd_level[i] / total,
            len(problem.preds[i]),
            len(problem.succs[i]),
            *kind,
        ])
    x = np.asarray(rows, dtype=float)
    std = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)


def _mean_adjacency(problem: PlacementProblem) -> tuple[torch.Tensor, torch.Tensor]:
    n = len(problem.nodes)
    pred = torch.zeros(n, n)
    succ = torch.zeros(n, n)
    for i in range(n):
        for p, _ in problem.preds[i]:
            pred[i, p] = 1.0
        for s, _ in problem.succs[i]:
            succ[i, s] = 1.0
    pred = pred / pred.sum(1, keepdim=True).clamp(min=1)
    succ = succ / succ.sum(1, keepdim=True).clamp(min=1)
    return pred, succ


class GrouperPlacer(nn.Module):
    """Op embeddings (2 message-passing rounds) -> group per op -> device per group."""

    def __init__(self, features: int, groups: int, devices: int, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(features, hidden), nn.Tanh())
        self.rounds = nn.ModuleList([nn.Linear(3 * hidden, hidden) for _ in range(2)])
        self.grouper = nn.Linear(hidden, groups)
        self.placer = nn.Sequential(nn.Linear(hidden + 2, hidden), nn.Tanh(), nn.Linear(hidden, devices))
        self.groups, self.devices = groups, devices

    def op_embeddings(self, x: torch.Tensor, pred: torch.Tensor, succ: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.rounds:
            h = torch.tanh(layer(torch.cat([h, pred @ h, succ @ h], dim=1))) + h
        return h

    def group_logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.grouper(h)

    def device_logits(self, h: torch.Tensor, groups: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
        """Device logits per group, for a batch of group assignments ``groups`` (batch, ops)."""
        onehot = torch.nn.functional.one_hot(groups, self.groups).float()  # (B, n, G)
        count = onehot.sum(1)  # (B, G)
        mean = torch.einsum("bng,nh->bgh", onehot, h) / count.clamp(min=1).unsqueeze(-1)
        share = count / groups.shape[1]
        load = torch.einsum("bng,n->bg", onehot, work)
        return self.placer(torch.cat([mean, share.unsqueeze(-1), load.unsqueeze(-1)], dim=-1))  # (B, G, D)


@dataclass
class PPOConfig:
    groups: int = 16
    batch: int = 16
    epochs: int = 4
    lr: float = 3e-3
    clip: float = 0.2
    entropy: float = 0.01
    hidden: int = 64
    budget_s: float = 10.0
    iterations: int | None = None
    seed: int = 0
    segment_init: bool = True  # start the grouper at contiguous topological segments
    segment_steps: int = 100

    def validate(self) -> None:
        for name in ("groups", "batch", "epochs", "hidden"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name, value, "an integer >= 1")
        if not self.budget_s > 0:
            raise InputError("budget_s", self.budget_s, "a number of seconds > 0")
        if self.iterations is not None and self.iterations < 1:
            raise InputError("iterations", self.iterations, "an integer >= 1")


class PPOPlacer:
    """The policy, its optimiser and the training loop; ``step_and_propose`` serves the hybrid ES."""

    def __init__(self, problem: PlacementProblem, cfg: PPOConfig) -> None:
        cfg.validate()
        self.problem, self.cfg = problem, cfg
        torch.manual_seed(cfg.seed)
        self.rng = torch.Generator().manual_seed(cfg.seed)
        self.x = torch.tensor(op_features(problem), dtype=torch.float32)
        self.pred, self.succ = _mean_adjacency(problem)
        work = problem.fwd_s.mean(axis=1)
        self.work = torch.tensor(work / max(work.sum(), 1e-30), dtype=torch.float32)
        groups = min(cfg.groups, len(problem.nodes))
        self.net = GrouperPlacer(self.x.shape[1], groups, problem.devices.count, cfg.hidden)
        if cfg.segment_init:
            self._segment_init(cfg.segment_steps)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr)

        self.reference = max(problem.step_time(single(problem)), 1e-30)
        self.best = math.inf
        self.best_placement: list[int] | None = None
        self.best_feasible = False
        self.evaluations = 0
        self.start = time.perf_counter()
        self.curve: list[tuple[float, int, float]] = []
        self.last_times = np.empty(0)

    def _segment_init(self, steps: int) -> float:
        """Fit the grouper to contiguous segments of a branch-keeping topological order; the final loss.

        Why: from random weights every group is a random mix of ops, so any device per group cuts
        the graph everywhere and the reward says little about any one choice; segments start from
        placements with few cuts, the way a pipeline stage or a branch would be placed.
        """
        n, groups = len(self.problem.nodes), self.net.groups
        pos = np.empty(n, dtype=int)
        pos[dfs_order(self.problem)] = np.arange(n)
        target = torch.tensor(pos * groups // n)
        opt = torch.optim.Adam(self.net.parameters(), lr=1e-2)
        loss = torch.tensor(0.0)
        for _ in range(steps):
            h = self.net.op_embeddings(self.x, self.pred, self.succ)
            loss = nn.functional.cross_entropy(self.net.group_logits(h), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return float(loss.detach())

    def _sample(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """A batch: groups (B, n), devices (B, G), and their log-probabilities (old policy)."""
        with torch.no_grad():
            h = self.net.op_embeddings(self.x, self.pred, self.succ)
            gl = torch.log_softmax(self.net.group_logits(h), dim=-1)  # (n, G)
            B = self.cfg.batch
            groups = torch.multinomial(gl.exp(), B, replacement=True, generator=self.rng).T  # (B, n)
            dl = torch.log_softmax(self.net.device_logits(h, groups, self.work), dim=-1)  # (B, G, D)
            devices = torch.multinomial(dl.exp().reshape(-1, dl.shape[-1]), 1, generator=self.rng)
            devices = devices.reshape(B, -1)
            glp = gl.gather(1, groups.T).T  # (B, n)
            dlp = dl.gather(2, devices.unsqueeze(-1)).squeeze(-1)  # (B, G)
        return groups, devices, glp, dlp

    def _evaluate(self, groups: torch.Tensor, devices: torch.Tensor) -> tuple[np.ndarray, list[list[int]]]:
        placements = torch.gather(devices, 1, groups).tolist()
        times = np.empty(len(placements))
        for b, placement in enumerate(placements):
            sim = self.problem.simulate(placement, validate=False)
            times[b] = sim.step_time_s
            self.evaluations += 1
            if sim.step_time_s < self.best:
                self.best, self.best_placement, self.best_feasible = sim.step_time_s, placement, sim.feasible
                self.curve.append((time.perf_counter() - self.start, self.evaluations, self.best))
        return times, placements

    def iterate(self) -> list[list[int]]:
        """One PPO iteration: sample a batch, price it, update; returns the batch's placements."""
        groups, devices, old_g, old_d = self._sample()
        times, placements = self._evaluate(groups, devices)
        self.last_times = times
        reward = -np.log(times / self.reference)
        adv = (reward - reward.mean()) / (reward.std() + 1e-8)
        adv_t = torch.tensor(adv, dtype=torch.float32)
        for _ in range(self.cfg.epochs):
            h = self.net.op_embeddings(self.x, self.pred, self.succ)
            gl = torch.log_softmax(self.net.group_logits(h), dim=-1)
            dl = torch.log_softmax(self.net.device_logits(h, groups, self.work), dim=-1)
            new_g = gl.gather(1, groups.T).T
            new_d = dl.gather(2, devices.unsqueeze(-1)).squeeze(-1)
            ratio = torch.exp(torch.cat([new_g - old_g, new_d - old_d], dim=1))  # (B, decisions)
            a = adv_t.unsqueeze(1)
            surrogate = torch.min(ratio * a, ratio.clamp(1 - self.cfg.clip, 1 + self.cfg.clip) * a).mean()
            entropy = -(gl.exp() * gl).sum(-1).mean() - (dl.exp() * dl).sum(-1).mean()
            loss = -surrogate - self.cfg.entropy * entropy
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return placements

    def greedy(self) -> list[int]:
        """The policy's most likely placement (argmax group, then argmax device)."""
        with torch.no_grad():
            h = self.net.op_embeddings(self.x, self.pred, self.succ)
            groups = self.net.group_logits(h).argmax(-1).unsqueeze(0)
            devices = self.net.device_logits(h, groups, self.work).argmax(-1)
            return torch.gather(devices, 1, groups)[0].tolist()

    def step_and_propose(self) -> list[int]:
        """Hybrid ES hook: one PPO iteration, then the best of its batch and the greedy placement."""
        batch = self.iterate()
        greedy = self.greedy()
        candidates = [*batch, greedy]
        times = [*self.last_times, self.problem.step_time(greedy)]
        return candidates[int(np.argmin(times))]


def train_ppo(problem: PlacementProblem, cfg: PPOConfig,
              progress: Callable[[float, float], None] | None = None) -> SearchResult:
    """Train until the wall-clock budget (or ``iterations``) is spent; the best placement sampled."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        placer = PPOPlacer(problem, cfg)
        placer.start = start = time.perf_counter()
        it = 0
        while True:
            placer.iterate()
            it += 1
            elapsed = time.perf_counter() - start
            if progress is not None:
                frac = it / cfg.iterations if cfg.iterations is not None else elapsed / cfg.budget_s
                progress(min(1.0, frac), placer.best)
            if cfg.iterations is not None:
                if it >= cfg.iterations:
                    break
            elif elapsed >= cfg.budget_s:
                break
        greedy = placer.greedy()
        sim = problem.simulate(greedy)
        placer.evaluations += 1
        if sim.step_time_s < placer.best:
            placer.best, placer.best_placement, placer.best_feasible = sim.step_time_s, greedy, sim.feasible
            placer.curve.append((time.perf_counter() - start, placer.evaluations, placer.best))
        assert placer.best_placement is not None
        return SearchResult("ppo", placer.best_placement, placer.best, placer.best_feasible, placer.evaluations,
                            time.perf_counter() - start, placer.curve)
    finally:
        torch.set_num_threads(threads)
