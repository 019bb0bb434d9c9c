"""DDP's buckets in the graph planner: the data-parallel exchange overlaps the last backward (planner/overlap.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.planner.overlap import DDP_BUCKET_CAP_BYTES, exposed_exchange_s, gradient_buckets

units = st.lists(st.tuples(st.floats(0, 2e8), st.floats(1e-6, 1.0)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(units)
def test_buckets_hold_every_gradient_once_and_close_in_backward_order(pairs: list[tuple[float, float]]) -> None:
    grads, seconds = np.array([g for g, _ in pairs]), np.array([s for _, s in pairs])
    ready, sizes = gradient_buckets(grads, seconds)
    if grads.sum() <= 0:
        assert len(ready) == 0
        return
    assert sizes.sum() == pytest.approx(grads.sum(), rel=1e-9)
    assert len(sizes) == max(1, int(np.ceil(grads.sum() / DDP_BUCKET_CAP_BYTES - 1e-9)))
    assert np.all(sizes[:-1] == pytest.approx(DDP_BUCKET_CAP_BYTES)) and 0 < sizes[-1] <= DDP_BUCKET_CAP_BYTES * 1.0001
    assert np.all(np.diff(ready) >= -1e-12) and ready[0] >= 0
    assert ready[-1] == pytest.approx(seconds.sum())


def test_one_unit_fills_its_buckets_evenly_over_its_backward() -> None:
    ready, sizes = gradient_buckets(np.array([4 * DDP_BUCKET_CAP_BYTES]), np.array([0.08]))
    assert list(sizes) == [DDP_BUCKET_CAP_BYTES] * 4
    assert ready == pytest.approx([0.02, 0.04, 0.06, 0.08])


def test_the_backward_runs_the_units_in_reverse() -> None:
    """The last unit's gradients come first: a model whose gradients sit in its first unit fills nothing
    until the backward reaches it."""
    ready, _ = gradient_buckets(np.array([DDP_BUCKET_CAP_BYTES, 0.0]), np.array([0.01, 0.03]))
    assert ready == pytest.approx([0.04])
    ready, _ = gradient_buckets(np.array([0.0, DDP_BUCKET_CAP_BYTES / 2, DDP_BUCKET_CAP_BYTES / 2]),
                                np.array([0.05, 0.01, 0.01]))
    assert ready == pytest.approx([0.07])  # the last bucket closes with the whole backward


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 0.1)), min_size=1, max_size=10), st.floats(0.01, 1))
def test_the_exposed_exchange_is_between_its_last_bucket_and_all_of_it(buckets: list[tuple[float, float]],
                                                                       backward: float) -> None:
    ready = np.sort([r for r, _ in buckets]) * backward
    ready[-1] = backward
    seconds = np.array([s for _, s in buckets])
    exposed = exposed_exchange_s(ready, seconds, backward)
    assert seconds[-1] - 1e-12 <= exposed <= seconds.sum() + 1e-12


def test_a_bucket_waits_for_the_one_before_it() -> None:
    # three 10 ms exchanges ready at 0, 1 and 20 ms of a 20 ms backward: 0-10, 10-20, 20-30 ms: 10 ms exposed
    assert exposed_exchange_s(np.array([0.0, 0.001, 0.02]), np.array([0.01] * 3), 0.02) == pytest.approx(0.01)
    # ready at 0, 0, 0.02 with 15 ms each: 0-15, 15-30, 30-45 -> 25 ms exposed
    assert exposed_exchange_s(np.array([0.0, 0.0, 0.02]), np.array([0.015] * 3), 0.02) == pytest.approx(0.025)
