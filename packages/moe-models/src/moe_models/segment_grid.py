"""SegmentGrid: the grid a training forward's attention runs on, one segment of key-query slots per grid row.

Two layouts, chosen by their cost: rows (the `[B, T]` batch; a row that shares a prefix reads those cells from the
owner's tokens) or segments (an owner row and the rows that share its prefix in one grid row, the prefix once).
Segments pay where prefixes are long next to what follows them (a GRPO group's short answers to one prompt); with
long answers, a segment's squared length costs more than its rows'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from moe_models.token_layout import TokenLayout, kept_source, read_tokens

ROW_COST_PAIRS = 1000
"""A grid row's fixed cost in the attention kernel, in key-query pairs (torch's CPU flash attention, fit over
[64, 26], [9, 80] and [6, 320] grids): a grid of S rows of U slots costs S * (ROW_COST_PAIRS + U^2)."""


@dataclass(frozen=True)
class SegmentGrid:
    """`segments` x `slots` cells. `source` `[S*U]` int64: the token (of the layout's N) each cell reads, N when
    empty; `home` `[N]` int64: the cell whose output is each token's; `mask` `[S, 1, U, U]` bool, True where a query
    may read a key: both cells hold tokens, the key is at or before the query's position and belongs to the query's
    row or to the prefix its row shares. A query slot that reads nothing else (an empty one) reads itself, keeping
    every softmax finite. `positions` `[S, U]` int64: each cell's position, -1 when empty."""

    segments: int
    slots: int
    source: torch.Tensor
    home: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def of(cls, layout: TokenLayout, owners: torch.Tensor | None, shared: torch.Tensor | None) -> SegmentGrid:
        """owners and shared `[B]` as `TokenLayout.of` took them (None: no shared prefixes); rows that share an
        owner share their prefix length (as `shared_prefix.prefix_owners` assigns them)."""
        device = layout.positions.device
        if (
            owners is None
            or shared is None
            or bool((owners.to(device) == torch.arange(layout.batch, device=device)).all())
        ):
            return cls._rows(layout)
        segment_of_row = torch.unique(owners.to(device), return_inverse=True)[1]  # [B]
        segment = segment_of_row.index_select(0, layout.rows)  # [N]
        counts = torch.bincount(segment)  # [S]
        slots = int(counts.max())
        if counts.numel() * (ROW_COST_PAIRS + slots**2) >= layout.batch * (ROW_COST_PAIRS + layout.seq**2):
            return cls._rows(layout)
        order = torch.sort(segment, stable=True).indices  # [N]: tokens by segment, layout order within one
        first = (counts.cumsum(0) - counts).index_select(0, segment.index_select(0, order))
        slot = torch.empty_like(segment)
        slot[order] = torch.arange(layout.num_tokens, device=device) - first
        home = segment * slots + slot  # [N]
        cells = int(counts.numel()) * slots
        source = torch.full((cells,), layout.num_tokens, dtype=torch.int64, device=device)
        source[home] = torch.arange(layout.num_tokens, device=device)
        rows = torch.arange(layout.batch, device=device)
        prefix = torch.where(owners.to(device) != rows, shared.to(device), 0)  # [B] shared tokens a row reads
        return cls._build(layout, int(counts.numel()), slots, source, home, prefix)

    @classmethod
    def _rows(cls, layout: TokenLayout) -> SegmentGrid:
        """The `[B, T]` batch as the grid: cell (b, t) reads what the layout's `unpack` puts there."""
        n, cells = layout.num_tokens, layout.batch * layout.seq
        device = layout.positions.device
        if layout.gather is not None:
            source = layout.gather
        elif layout.index is not None:
            source = torch.full((cells,), n, dtype=torch.int64, device=device)
            source[layout.index] = torch.arange(n, device=device)
        else:
            source = torch.arange(cells, device=device)
        home = torch.arange(cells, device=device) if layout.index is None else layout.index
        return cls._build(layout, layout.batch, layout.seq, source, home, None)

    @classmethod
    def _build(
        cls,
        layout: TokenLayout,
        segments: int,
        slots: int,
        source: torch.Tensor,
        home: torch.Tensor,
        prefix: torch.Tensor | None,
    ) -> SegmentGrid:
        """prefix `[B]`: the leading positions a row reads from its owner, 0 for none (None: the grid is the
        batch's rows, each cell in its grid row's)."""
        n = layout.num_tokens
        real = source < n  # [S*U]
        token = source.clamp(max=max(n - 1, 0))
        positions = torch.where(real, layout.positions.index_select(0, token), -1).view(segments, slots)
        q_pos, k_pos = positions[:, :, None], positions[:, None, :]  # [S, U, 1], [S, 1, U]
        allowed = (q_pos >= 0) & (k_pos >= 0) & (k_pos <= q_pos)  # [S, U, U]
        if prefix is not None:  # a segment: a key of the query's row, or of the prefix the query's row reads
            row = torch.where(real, layout.rows.index_select(0, token), -1).view(segments, slots)
            reads_prefix = prefix.index_select(0, row.clamp(min=0).reshape(-1)).view_as(row)  # [S, U]
            allowed &= (row[:, :, None] == row[:, None, :]) | (k_pos < reads_prefix[:, :, None])
        return cls(segments, slots, source, home, positions, keep_a_key(allowed)[:, None])

    def gather(self, x: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """x `[M, heads, D]` of the layout's `tokens` `[M]` (ascending; None: all N) -> `[S, heads, U, D]`, zeros in
        cells whose token is not among them."""
        source = self.source if tokens is None else kept_source(self.source, tokens, int(self.home.numel()))
        grid = read_tokens(x, source)
        return grid.view(self.segments, self.slots, *x.shape[1:]).transpose(1, 2)


def keep_a_key(allowed: torch.Tensor) -> torch.Tensor:
    """allowed `[..., Q, L]` (Q = L) with each query that allows no key given its own (only empty slots have none),
    keeping every softmax finite."""
    diagonal = torch.eye(allowed.shape[-1], dtype=torch.bool, device=allowed.device)
    return allowed | (diagonal & ~allowed.any(dim=-1, keepdim=True))
