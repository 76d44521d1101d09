"""Cutting a grid's segments into blocks of similar length: attention costs a block its segments times its longest
segment squared, so short segments padded to a long one's slots waste most of a long-tailed batch's attention."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROW_COST_PAIRS = 1000
"""A grid row's fixed cost in the attention kernel, in key-query pairs (torch's CPU flash attention, fit over
[64, 26], [9, 80] and [6, 320] grids): a block of S rows of U slots costs S * (ROW_COST_PAIRS + U^2)."""

BLOCK_COST_PAIRS = 5000
"""A block's fixed cost in key-query pairs: one attention call, forward and backward (torch's CPU flash attention,
~0.2 ms on one core, fit over grids of 1-48 rows of 8-320 slots), on top of its rows' costs."""


@dataclass(frozen=True)
class LengthBlocks:
    """`blocks`: each block's segments (indices into the lengths, longest first) and `slots` its longest length;
    `cost` in key-query pairs as `ROW_COST_PAIRS` and `BLOCK_COST_PAIRS` price it."""

    blocks: tuple[tuple[int, ...], ...]
    slots: tuple[int, ...]
    cost: float

    @classmethod
    def one(cls, count: int, slots: int) -> LengthBlocks:
        """All `count` segments in one block of `slots` slots, in their own order (the unblocked grid)."""
        return cls((tuple(range(count)),), (slots,), count * (ROW_COST_PAIRS + slots**2) + BLOCK_COST_PAIRS)

    @classmethod
    def cheapest(cls, lengths: list[int]) -> LengthBlocks:
        """The cheapest cut of segments of `lengths` (each >= 1) into blocks of consecutive lengths, longest first.
        Segments of one length never pay for a cut between them, so the search runs over distinct lengths: exact
        dynamic programming, O(D^2) for D distinct lengths."""
        if not lengths:
            raise ValueError("LengthBlocks.cheapest: expected at least one segment, got none")
        order = sorted(range(len(lengths)), key=lambda s: -lengths[s])
        distinct, counts = np.unique(-np.asarray(lengths, dtype=np.int64), return_counts=True)  # longest first
        values = (-distinct).astype(np.float64)  # [D]
        before = np.concatenate([[0], np.cumsum(counts)])  # [D+1] segments before each distinct length
        best, cut = np.zeros(len(values) + 1), np.zeros(len(values) + 1, dtype=np.int64)
        for end in range(1, len(values) + 1):  # blocks ending before distinct length `end`
            # cost[i]: the best cut before distinct length i, then one block of lengths i .. end-1 (slots values[i])
            cost = best[:end] + (before[end] - before[:end]) * (ROW_COST_PAIRS + values[:end] ** 2) + BLOCK_COST_PAIRS
            cut[end] = int(np.argmin(cost))
            best[end] = cost[cut[end]]
        blocks, slots, end = [], [], len(values)
        while end > 0:
            start = int(cut[end])
            blocks.append(tuple(order[before[start] : before[end]]))
            slots.append(int(values[start]))
            end = start
        return cls(tuple(reversed(blocks)), tuple(reversed(slots)), float(best[-1]))
