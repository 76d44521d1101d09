"""`LengthBlocks.cheapest` cuts a grid's segments into the blocks that cost the least: checked against every
partition of small sets, and on a long-tailed GRPO batch's lengths."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models.length_blocks import BLOCK_COST_PAIRS, ROW_COST_PAIRS, LengthBlocks


def _partitions(items: list[int]) -> Iterator[list[list[int]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1 :]]


def _cost(lengths: list[int], blocks: Iterable[Iterable[int]]) -> int:
    return sum(len(b) * (ROW_COST_PAIRS + max(lengths[s] for s in b) ** 2) + BLOCK_COST_PAIRS for b in blocks)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 400), min_size=1, max_size=6))
def test_the_cut_costs_no_more_than_any_partition(lengths: list[int]) -> None:
    plan = LengthBlocks.cheapest(lengths)
    best = min(_cost(lengths, p) for p in _partitions(list(range(len(lengths)))))
    assert plan.cost == pytest.approx(best)
    assert _cost(lengths, plan.blocks) == pytest.approx(plan.cost)  # the cost it reports is its blocks'
    assert sorted(s for b in plan.blocks for s in b) == list(range(len(lengths)))  # every segment once
    assert all(slots == max(lengths[s] for s in b) for b, slots in zip(plan.blocks, plan.slots, strict=True))


def test_a_long_tail_is_cut_and_equal_lengths_stay_together() -> None:
    lengths = [192] * 4 + [168] * 4 + [122] * 4 + [102] * 2 + [24] * 8 + [22] * 8
    plan = LengthBlocks.cheapest(lengths)
    assert len(plan.blocks) > 2 and plan.cost < LengthBlocks.one(len(lengths), 192).cost / 2
    for length in set(lengths):
        assert sum(any(lengths[s] == length for s in b) for b in plan.blocks) == 1


def test_equal_lengths_make_one_block() -> None:
    assert LengthBlocks.cheapest([7] * 5).blocks == ((0, 1, 2, 3, 4),)


def test_no_segments_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one segment"):
        LengthBlocks.cheapest([])
