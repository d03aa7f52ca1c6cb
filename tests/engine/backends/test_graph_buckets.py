"""engine.backends.graph_buckets: which shapes are captured and which bucket a batch runs in."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.backends.graph_buckets import (
    ALIGN_FRAMES,
    DEFAULT_BATCHES,
    GROWTH,
    Bucket,
    BucketPlan,
    plan_buckets,
)
from engine.serving.budget import Architecture, CostModel


def test_lengths_cover_up_to_the_longest_segment_in_small_aligned_steps() -> None:
    plan = plan_buckets(250)  # 15 s of feature frames
    assert plan.batches == DEFAULT_BATCHES
    assert plan.lengths[0] == 16 and plan.lengths[-1] == 256
    assert all(t % ALIGN_FRAMES == 0 for t in plan.lengths)
    for shorter, longer in itertools.pairwise(plan.lengths):
        assert shorter < longer <= max(shorter * GROWTH, shorter + ALIGN_FRAMES)
    assert len(plan.lengths) <= 16  # a few buckets, not one per length


def test_a_short_longest_segment_gets_one_length() -> None:
    assert plan_buckets(5).lengths == (8,)
    assert plan_buckets(16).lengths == (16,)


def test_buckets_come_largest_first() -> None:
    plan = plan_buckets(64, (1, 4))
    sizes = [b.batch * b.frames for b in plan.buckets]
    assert sizes == sorted(sizes, reverse=True)
    assert set(plan.buckets) == {Bucket(b, t) for b in (1, 4) for t in plan.lengths}


def test_choose_takes_the_smallest_bucket_that_holds_the_batch() -> None:
    plan = BucketPlan((1, 2, 4, 8), (16, 24, 32, 48))
    assert plan.choose(1, 1) == Bucket(1, 16)
    assert plan.choose(3, 17) == Bucket(4, 24)
    assert plan.choose(8, 48) == Bucket(8, 48)
    assert plan.choose(9, 10) is None  # more items than any bucket: eager
    assert plan.choose(2, 49) is None  # longer than any bucket: eager
    assert plan.padded(3, 17) == (4, 24)
    assert plan.padded(9, 10) == (9, 10)


@given(st.integers(1, 20), st.integers(1, 300))
def test_the_chosen_bucket_is_the_least_that_holds(batch: int, frames: int) -> None:
    plan = plan_buckets(250)
    chosen = plan.choose(batch, frames)
    holding = [b for b in plan.buckets if b.batch >= batch and b.frames >= frames]
    if chosen is None:
        assert holding == []
    else:
        assert chosen in holding
        assert all(chosen.batch <= b.batch and chosen.frames <= b.frames for b in holding)


@pytest.mark.parametrize(
    ("batches", "lengths"), [((), (8,)), ((1,), ()), ((2, 1), (8,)), ((1,), (8, 8)), ((0,), (8,))]
)
def test_plans_refuse_unordered_or_empty_shapes(
    batches: tuple[int, ...], lengths: tuple[int, ...]
) -> None:
    with pytest.raises(ValueError, match="bucket"):
        BucketPlan(batches, lengths)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        plan_buckets(0)
    with pytest.raises(ValueError):
        plan_buckets(100, growth=1.0)
    with pytest.raises(ValueError, match="at least one item"):
        plan_buckets(100).choose(0, 10)


def test_the_cost_model_prices_a_batch_at_its_bucket() -> None:
    plan = BucketPlan((1, 4), (64, 128))
    arch = Architecture(hidden=64, heads=2, ffn=128)
    bucketed = CostModel(arch, scale=1.5, shape=plan.padded)
    plain = CostModel(arch, scale=1.5)
    assert bucketed.bytes(3, 100) == plain.bytes(4, 128)
    assert bucketed.bytes(1, 64) == plain.bytes(1, 64)
    assert bucketed.bytes(5, 100) == plain.bytes(5, 100)  # eager: its own shape
