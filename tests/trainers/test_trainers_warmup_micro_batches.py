"""The warm-up's micro-batches are the training step's split (`split_by_token_budget`) once a batch does not fit
whole, and equal what the warm-up always cut (its base stays bit for bit): pinned against that greedy cut, written
out here."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from trainers.warmup import micro_batches


def greedy_cut(lengths: list[int], budget: int) -> list[list[int]]:
    """The warm-up's own cut before it shared the step's splitter."""
    if len(lengths) * max(lengths) <= budget:
        return [list(range(len(lengths)))]
    groups: list[list[int]] = [[]]
    width = 0
    for r in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        width = max(width, lengths[r])
        if groups[-1] and width * (len(groups[-1]) + 1) > budget:
            groups.append([])
            width = lengths[r]
        groups[-1].append(r)
    return groups


@settings(deadline=None)  # the first call imports torch (the splitter's module): seconds, once
@given(st.lists(st.integers(1, 300), min_size=1, max_size=40), st.integers(1, 3000))
def test_the_warmups_micro_batches_are_the_greedy_cut_it_always_made(lengths: list[int], budget: int) -> None:
    assert micro_batches(lengths, budget) == greedy_cut(lengths, budget)


def test_a_batch_that_fits_keeps_its_input_order_and_one_that_does_not_goes_longest_first() -> None:
    assert micro_batches([3, 9, 5], 27) == [[0, 1, 2]]
    assert micro_batches([3, 9, 5], 20) == [[1, 2], [0]]
