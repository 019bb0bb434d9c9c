"""Error-feedback memory that follows the parameters when DDP lays its buckets out again.

Why: a bucket's residual is a flat tensor in the order of the bucket's parameters, keyed by the bucket's
index. DDP lays the first iteration's buckets out in declaration order and rebuilds them after it in the order
gradients became ready (the reverse, for an MLP): iteration 2 then added iteration 1's residual of the first
layer's weights to the last layer's gradients. A resumed run meets the same change the other way round (its
first iteration is in declaration order again, its checkpointed memory in the rebuilt order), so it was not
the uninterrupted run. Here each bucket's layout, (parameter index, elements) in bucket order, is kept beside
its memory; when a bucket's layout changes, every residual is cut into its parameters' pieces and each bucket
takes its own pieces back, in its new order, the next time it is exchanged. This runs where the residuals
are used (the communication thread), so no exchange in flight sees a half-moved memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

import torch

#: a bucket's parameters in its order: (index of the parameter in the model, number of elements)
Layout = tuple[tuple[int, int], ...]

__all__ = ["BucketLayouts", "Layout"]


class BucketLayouts:
    """Each bucket's layout, and the residual pieces waiting for the bucket that now holds their parameter."""

    def __init__(self, parameters: Iterable[torch.nn.Parameter] = ()) -> None:
        self._index = {id(p): i for i, p in enumerate(parameters)}
        self.layouts: dict[int, Layout] = {}
        self._pieces: dict[tuple[int, int], torch.Tensor] = {}  # (parameter, owner rank) -> its residual
        self._orders: dict[Layout, torch.Tensor] = {}  # a bucket layout -> its positions in parameter order

    def canonical(self, layout: Layout) -> tuple[Layout, torch.Tensor | None]:
        """``layout`` in the model's parameter order, and the positions of the bucket's buffer that give it
        (None when the bucket is in that order already).

        Why: Top-k breaks ties between equal magnitudes by position, so a bucket exchanged in declaration order
        (a process's first iteration) and the same values in DDP's rebuilt order can keep different elements: a
        run resumed at step 9 kept a different one of 5 equal values and was no longer the uninterrupted run.
        The compressor always sees a bucket in parameter order; its buffer is gathered into it and the result
        scattered back."""
        ordered = tuple(sorted(layout))
        if ordered == layout:
            return layout, None
        perm = self._orders.get(layout)
        if perm is None:
            offsets, at = {}, 0
            for parameter, numel in layout:
                offsets[parameter] = at
                at += numel
            perm = torch.cat([torch.arange(offsets[p], offsets[p] + n) for p, n in ordered]) if ordered else \
                torch.zeros(0, dtype=torch.long)
            self._orders[layout] = perm
        return ordered, perm

    def layout_of(self, parameters: Iterable[torch.Tensor]) -> Layout:
        """The layout of a bucket holding ``parameters`` (``GradBucket.parameters()``), in that order."""
        return tuple((self._index.get(id(p), -1), p.numel()) for p in parameters)

    def align(self, residuals: MutableMapping[tuple[int, int], torch.Tensor], key: int, layout: Layout) -> None:
        """Make ``residuals`` of bucket ``key`` (every owner's) follow ``layout`` before it is exchanged."""
        if self.layouts.get(key) == layout:
            return
        known = dict(self.layouts)
        if key in self.layouts:  # DDP rebuilt its buckets (or the memory came from another layout): cut it up
            self._cut(residuals)
        if self._pieces:
            self._assemble(residuals, key, layout)
        self.layouts[key] = layout
        # a bucket none of whose parameters this one took keeps its layout: its memory goes back together now,
        # not at its next exchange (a checkpoint in between would not have held it)
        wanted = {parameter for parameter, _ in layout}
        for other, other_layout in known.items():
            if other != key and other not in self.layouts and not wanted & {p for p, _ in other_layout}:
                self._assemble(residuals, other, other_layout)
                self.layouts[other] = other_layout

    def _cut(self, residuals: MutableMapping[tuple[int, int], torch.Tensor]) -> None:
        for (key, owner) in [k for k in residuals if k[0] in self.layouts]:
            flat = residuals.pop((key, owner))
            offset = 0
            for parameter, numel in self.layouts[key]:
                self._pieces[(parameter, owner)] = flat[offset:offset + numel]
                offset += numel
        self.layouts.clear()

    def _assemble(self, residuals: MutableMapping[tuple[int, int], torch.Tensor], key: int, layout: Layout) -> None:
        owners = {owner for (_, owner) in self._pieces}
        wanted = {parameter for parameter, _ in layout}
        for owner in sorted(owners):
            if not any((parameter, owner) in self._pieces for parameter in wanted):
                continue
            sample = next(iter(self._pieces.values()))
            flat = torch.zeros(sum(n for _, n in layout), dtype=sample.dtype, device=sample.device)
            offset = 0
            for parameter, numel in layout:
                piece = self._pieces.pop((parameter, owner), None)
                if piece is not None and piece.numel() == numel:
                    flat[offset:offset + numel] = piece
                offset += numel
            residuals[(key, owner)] = flat

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps beside the residuals: the layout each was written in."""
        return {str(key): [list(pair) for pair in layout] for key, layout in self.layouts.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.layouts = {int(key): tuple((int(p), int(n)) for p, n in layout) for key, layout in state.items()}
        self._pieces.clear()
