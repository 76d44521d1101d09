"""SegmentGrid: the grids a training forward's attention runs on, one segment of key-query slots per grid row.

Two layouts, chosen by their cost: rows (each row of the `[B, T]` batch a segment; a row that shares a prefix reads
those cells from the owner's tokens) or segments (an owner row and the rows that share its prefix in one segment, the
prefix once). Segments pay where prefixes are long next to what follows them (a GRPO group's short answers to one
prompt); with long answers, a segment's squared length costs more than its rows'. Either layout's segments are cut
into blocks of similar length (`LengthBlocks`), each block a grid of its own, so a short segment does not pay for
the slots of a long one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from moe_models.attention_ops import band
from moe_models.length_blocks import LengthBlocks
from moe_models.token_layout import TokenLayout, kept_source, read_tokens


@dataclass(frozen=True)
class GridBlock:
    """`segments` x `slots` cells: `positions` `[S, U]` int64 each cell's position, -1 when empty; `mask`
    `[S, 1, U, U]` bool, True where a query may read a key: both cells hold tokens, the key is at or before the
    query's position and belongs to the query's row or to the prefix its row shares. A query slot that reads nothing
    else (an empty one) reads itself, keeping every softmax finite."""

    segments: int
    slots: int
    positions: torch.Tensor
    mask: torch.Tensor

    def banded(self, window: int | None) -> torch.Tensor:
        """The mask limited to a sliding window of `window` positions (None: the mask)."""
        if window is None:
            return self.mask
        pos = self.positions
        return keep_a_key(band(self.mask, pos[:, None, :], pos[:, None, None, :], window))


@dataclass(frozen=True)
class SegmentGrid:
    """`blocks`, their cells laid out one after another (block by block, each row-major): `source` `[C]` int64 the
    token (of the layout's N) each cell reads, N when empty; `home` `[N]` int64 the cell whose output is each
    token's."""

    blocks: tuple[GridBlock, ...]
    source: torch.Tensor
    home: torch.Tensor

    @classmethod
    def of(
        cls, layout: TokenLayout, owners: torch.Tensor | None, shared: torch.Tensor | None, *, blocked: bool = True
    ) -> SegmentGrid:
        """owners and shared `[B]` as `TokenLayout.of` took them (None: no shared prefixes); rows that share an
        owner share their prefix length (as `shared_prefix.prefix_owners` assigns them). `blocked` False: the rows
        layout as one block of `[B, T]` slots, each row's keys in slots of their positions, a shared prefix read from
        its owner's tokens (the grid invariant mode needs: a query reduces over its row's keys in position order,
        whatever rows share)."""
        candidates = [_Cells.rows(layout)]
        device = layout.positions.device
        if (
            blocked
            and owners is not None
            and shared is not None
            and not bool((owners.to(device) == torch.arange(layout.batch, device=device)).all())
        ):
            candidates.append(_Cells.per_owner(layout, owners.to(device), shared.to(device)))
        plans = [(cells, cells.plan(blocked)) for cells in candidates]
        cells, plan = min(plans, key=lambda p: p[1].cost)  # rows on a tie
        return cls._build(layout, cells, plan)

    @classmethod
    def _build(cls, layout: TokenLayout, cells: _Cells, plan: LengthBlocks) -> SegmentGrid:
        """`cells` cut as `plan` says: a block keeps its segments' first `slots` cells, which hold every token of
        theirs (a segment's tokens fill its slots from 0), so every token keeps a home cell."""
        device = layout.positions.device
        picked = []  # [C]: each new cell's cell of `cells`
        for segments, slots in zip(plan.blocks, plan.slots, strict=True):
            segment = torch.tensor(segments, dtype=torch.int64, device=device)
            picked.append((segment[:, None] * cells.slots + torch.arange(slots, device=device)).reshape(-1))
        old = torch.cat(picked) if len(picked) > 1 else picked[0]
        source = cells.source.index_select(0, old)
        new = torch.full((cells.source.numel(),), -1, dtype=torch.int64, device=device)
        new[old] = torch.arange(old.numel(), device=device)
        home = new.index_select(0, cells.home)
        blocks, start = [], 0
        for segments, slots in zip(plan.blocks, plan.slots, strict=True):
            end = start + len(segments) * slots
            blocks.append(_block(layout, source[start:end], len(segments), slots, cells.prefix))
            start = end
        return cls(tuple(blocks), source, home)

    def gather(self, x: torch.Tensor, tokens: torch.Tensor | None = None) -> list[torch.Tensor]:
        """x `[M, heads, D]` of the layout's `tokens` `[M]` (ascending; None: all N) -> each block's
        `[S, heads, U, D]`, zeros in cells whose token is not among them."""
        source = self.source if tokens is None else kept_source(self.source, tokens, int(self.home.numel()))
        grid = read_tokens(x, source)  # [C, heads, D]
        sizes = [b.segments * b.slots for b in self.blocks]
        parts = grid.split(sizes) if len(sizes) > 1 else (grid,)
        return [
            p.view(b.segments, b.slots, *x.shape[1:]).transpose(1, 2) for p, b in zip(parts, self.blocks, strict=True)
        ]

    def scatter(self, outs: list[torch.Tensor], tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Each block's `[S, heads, U, D]` -> `[M, heads * D]` at the layout's `tokens` `[M]` (None: all N)."""
        flat = [o.transpose(1, 2).reshape(b.segments * b.slots, -1) for o, b in zip(outs, self.blocks, strict=True)]
        out = torch.cat(flat) if len(flat) > 1 else flat[0]  # [C, heads * D]
        return out.index_select(0, self.home if tokens is None else self.home.index_select(0, tokens))


@dataclass(frozen=True)
class _Cells:
    """One `[segments, slots]` grid before blocking: `source` `[S*U]`, `home` `[N]` as `SegmentGrid`'s; `prefix`
    `[B]` the leading positions a row reads from its owner (None: each segment is one row)."""

    segments: int
    slots: int
    source: torch.Tensor
    home: torch.Tensor
    prefix: torch.Tensor | None

    @classmethod
    def rows(cls, layout: TokenLayout) -> _Cells:
        """The `[B, T]` batch: cell (b, t) reads what the layout's `unpack` puts there."""
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
        return cls(layout.batch, layout.seq, source, home, None)

    @classmethod
    def per_owner(cls, layout: TokenLayout, owners: torch.Tensor, shared: torch.Tensor) -> _Cells:
        """One segment per owner: its tokens, then those of each row that reads its prefix, in layout order."""
        device = layout.positions.device
        segment_of_row = torch.unique(owners, return_inverse=True)[1]  # [B]
        segment = segment_of_row.index_select(0, layout.rows)  # [N]
        counts = torch.bincount(segment)  # [S]
        slots = int(counts.max())
        order = torch.sort(segment, stable=True).indices  # [N]: tokens by segment, layout order within one
        first = (counts.cumsum(0) - counts).index_select(0, segment.index_select(0, order))
        slot = torch.empty_like(segment)
        slot[order] = torch.arange(layout.num_tokens, device=device) - first
        home = segment * slots + slot  # [N]
        source = torch.full((int(counts.numel()) * slots,), layout.num_tokens, dtype=torch.int64, device=device)
        source[home] = torch.arange(layout.num_tokens, device=device)
        prefix = torch.where(owners != torch.arange(layout.batch, device=device), shared, 0)  # [B]
        return cls(int(counts.numel()), slots, source, home, prefix)

    def plan(self, blocked: bool) -> LengthBlocks:
        """The blocks this grid is cut into: by length when `blocked`, else one."""
        if not blocked:
            return LengthBlocks.one(self.segments, self.slots)
        real = (self.source < self.home.numel()).view(self.segments, self.slots)  # [S, U]
        slot = torch.arange(1, self.slots + 1, device=real.device)
        lengths = torch.where(real, slot, 0).amax(dim=1).clamp(min=1)  # [S] last real slot + 1
        return LengthBlocks.cheapest(lengths.tolist())


def _block(
    layout: TokenLayout, source: torch.Tensor, segments: int, slots: int, prefix: torch.Tensor | None
) -> GridBlock:
    """The block of `segments` x `slots` cells reading `source` `[S*U]`; prefix as `_Cells`'."""
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
    return GridBlock(segments, slots, positions, keep_a_key(allowed)[:, None])


def keep_a_key(allowed: torch.Tensor) -> torch.Tensor:
    """allowed `[..., Q, L]` (Q = L) with each query that allows no key given its own (only empty slots have none),
    keeping every softmax finite."""
    diagonal = torch.eye(allowed.shape[-1], dtype=torch.bool, device=allowed.device)
    return allowed | (diagonal & ~allowed.any(dim=-1, keepdim=True))
