"""Error-feedback memory follows its parameters when DDP lays the buckets out again (real_backend/bucket_layout)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.real_backend.bucket_layout import BucketLayouts


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=7), data=st.data())
def test_every_parameters_residual_lands_where_that_parameter_now_is(sizes: list[int], data: st.DataObject) -> None:
    params = [torch.nn.Parameter(torch.zeros(n)) for n in sizes]
    number = {id(p): i for i, p in enumerate(params)}
    layouts = BucketLayouts(params)
    # first layout: declaration order split into buckets; second: any order, any split (a rebuild)
    cut = data.draw(st.integers(0, len(params)))
    before = [params[:cut], params[cut:]]
    order = data.draw(st.permutations(range(len(params))))
    cut2 = data.draw(st.integers(0, len(params)))
    after = [[params[i] for i in order[:cut2]], [params[i] for i in order[cut2:]]]
    residuals: dict[tuple[int, int], torch.Tensor] = {}
    for key, bucket in enumerate(before):
        layouts.align(residuals, key, layouts.layout_of(bucket))
        for owner in (0, 1):  # a residual per local rank, each parameter's elements marked by its index
            residuals[(key, owner)] = torch.cat([torch.full((p.numel(),), 10.0 * number[id(p)] + owner)
                                                 for p in bucket]) if bucket else torch.zeros(0)
    for key, bucket in enumerate(after):
        layouts.align(residuals, key, layouts.layout_of(bucket))
    for key, bucket in enumerate(after):
        if not bucket:
            continue
        for owner in (0, 1):
            expected = torch.cat([torch.full((p.numel(),), 10.0 * number[id(p)] + owner) for p in bucket])
            assert torch.equal(residuals[(key, owner)], expected)


def test_an_unchanged_layout_leaves_the_memory_untouched() -> None:
    params = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))]
    layouts = BucketLayouts(params)
    residuals: dict[tuple[int, int], torch.Tensor] = {}
    layout = layouts.layout_of(params)
    layouts.align(residuals, 0, layout)
    memory = residuals[(0, 0)] = torch.arange(5.0)
    layouts.align(residuals, 0, layout)
    assert residuals[(0, 0)] is memory
    restored = BucketLayouts(params)
    restored.load_state_dict(layouts.state_dict())
    assert restored.layouts == layouts.layouts
