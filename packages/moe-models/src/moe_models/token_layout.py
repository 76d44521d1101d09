"""TokenLayout: which cells of a `[B, T]` batch hold distinct real tokens, so that every op but attention runs on
those alone."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenLayout:
    """The computed tokens of a `[batch, seq]` grid, row-major: `index` `[N]` int64 cells of the flattened grid that
    own a token (None: every cell, N = batch * seq), `positions` `[N]` int64 column of each (its rotary position),
    `rows` `[N]` int64 row of each, and `gather` `[batch * seq]` int64: the token (of the N) each cell reads, N for a
    padding cell (None: each real cell reads its own token).

    A shared prefix makes `gather` differ from the inverse of `index`: a row whose first P cells repeat an owner
    row's (`TokenLayout.of`'s `owners`) reads them from the owner, so they are computed once. That is exact when the
    rows agree on those tokens and on everything a token's value depends on (the replayed routing): under causal
    attention, a token's value depends on its row's cells up to itself only.

    `pack` and `unpack` move a per-token tensor between the grid `[B, T, ...]` and the packed `[N, ...]` form; a
    padding cell unpacks as zeros, a shared cell as its owner's value (the backward sums the sharers' gradients). A
    per-token op computes each row from that row alone, so a packed forward gives every real token the padded
    forward's values (to float rounding: a matmul's rounding may depend on its row count) without computing the
    padding.
    """

    batch: int
    seq: int
    index: torch.Tensor | None
    positions: torch.Tensor
    rows: torch.Tensor
    gather: torch.Tensor | None = None

    @classmethod
    def of(
        cls,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        *,
        owners: torch.Tensor | None = None,
        shared: torch.Tensor | None = None,
    ) -> TokenLayout:
        """input_ids `[B, T]`; attention_mask `[B, T]` (nonzero = real token) or None (every token real).
        owners `[B]` int64 and shared `[B]` int64 (both or neither): row b reads its first `shared[b]` cells from row
        `owners[b]` (b itself: none); an owner owns its own cells (`owners[owners[b]] == owners[b]`) and the caller
        guarantees the shared cells are real and equal to the owner's."""
        batch, seq = input_ids.shape
        device = input_ids.device
        columns = torch.arange(seq, device=device).repeat(batch)  # [B*T]
        rows = torch.arange(batch, device=device).repeat_interleave(seq)  # [B*T]
        if attention_mask is not None and tuple(attention_mask.shape) != (batch, seq):
            raise ValueError(f"attention_mask: got shape {tuple(attention_mask.shape)}, expected {(batch, seq)}")
        real = None if attention_mask is None else attention_mask.reshape(-1).to(torch.bool)  # [B*T]
        aliased = None if owners is None else _aliased_cells(owners, shared, seq)  # [B*T] bool
        if aliased is None or not bool(aliased.any()):
            if real is None or bool(real.all()):
                return cls(batch, seq, None, columns, rows)
            index = real.nonzero().squeeze(1)  # [N]
            return cls(batch, seq, index, columns.index_select(0, index), rows.index_select(0, index))
        assert owners is not None
        owned = ~aliased if real is None else real & ~aliased
        index = owned.nonzero().squeeze(1)  # [N]
        n = int(index.numel())
        gather = torch.full((batch * seq,), n, dtype=torch.int64, device=device)
        gather[index] = torch.arange(n, device=device)
        source_cell = owners.to(device).index_select(0, rows) * seq + columns  # [B*T]: the owner's cell
        gather = torch.where(aliased, gather.index_select(0, source_cell), gather)
        return cls(batch, seq, index, columns.index_select(0, index), rows.index_select(0, index), gather)

    def subset(self, keep: torch.Tensor) -> TokenLayout:
        """The layout of this layout's tokens `keep` `[M]` int64 (indices into its N tokens, ascending); cells that
        read a token not kept read zeros."""
        index = keep if self.index is None else self.index.index_select(0, keep)
        gather = None if self.gather is None else kept_source(self.gather, keep, self.num_tokens)
        return TokenLayout(
            self.batch,
            self.seq,
            index,
            self.positions.index_select(0, keep),
            self.rows.index_select(0, keep),
            gather,
        )

    @property
    def num_tokens(self) -> int:
        return self.batch * self.seq if self.index is None else int(self.index.numel())

    def tokens_of_cells(self, cells: torch.Tensor) -> torch.Tensor:
        """`[M]` int64 ascending: the distinct tokens (of the N) that the real cells among `cells` `[B*T]` bool
        read."""
        if self.gather is not None:
            read = torch.zeros(self.num_tokens + 1, dtype=torch.bool, device=cells.device)
            read[self.gather[cells]] = True
            return read[:-1].nonzero().squeeze(1)
        if self.index is None:
            return cells.nonzero().squeeze(1)
        return cells.index_select(0, self.index).nonzero().squeeze(1)

    def cell_tokens(self) -> torch.Tensor:
        """`[batch * seq]` int64: the token (of the N) each cell reads, N for a padding cell."""
        if self.gather is not None:
            return self.gather
        cells = self.batch * self.seq
        if self.index is None:
            return torch.arange(cells, device=self.positions.device)
        out = torch.full((cells,), self.num_tokens, dtype=torch.int64, device=self.positions.device)
        return out.index_copy_(0, self.index, torch.arange(self.num_tokens, device=self.positions.device))

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, T, ...]` -> `[N, ...]`."""
        flat = x.reshape(self.batch * self.seq, *x.shape[2:])
        return flat if self.index is None else flat.index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """`[N, ...]` -> `[B, T, ...]`: zeros at padding cells, a shared cell its owner's value."""
        if self.gather is not None:
            x = read_tokens(x, self.gather)
        elif self.index is not None:
            x = x.new_zeros(self.batch * self.seq, *x.shape[1:]).index_copy(0, self.index, x)
        return x.view(self.batch, self.seq, *x.shape[1:])


def read_tokens(x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """x `[N, ...]` read at `source` `[C]` (token indices, N: zeros) -> `[C, ...]`; the backward sums the gradients
    of cells that read one token."""
    return torch.cat([x, x.new_zeros(1, *x.shape[1:])]).index_select(0, source)


def kept_source(source: torch.Tensor, keep: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """`source` (token indices of N = `num_tokens`, N: none) renumbered into the kept tokens `keep` `[M]` (ascending):
    a kept token's index among them, M for any other."""
    renumber = torch.full((num_tokens + 1,), int(keep.numel()), dtype=torch.int64, device=keep.device)
    renumber[keep] = torch.arange(int(keep.numel()), device=keep.device)
    return renumber.index_select(0, source)


def _aliased_cells(owners: torch.Tensor, shared: torch.Tensor | None, seq: int) -> torch.Tensor:
    """`[B*T]` bool: the cells a row reads from its owner."""
    if shared is None or tuple(owners.shape) != tuple(shared.shape) or owners.dim() != 1:
        got = None if shared is None else tuple(shared.shape)
        raise ValueError(f"owners and shared: expected two [B] tensors, got {tuple(owners.shape)} and {got}")
    batch = int(owners.numel())
    if not bool((owners.index_select(0, owners) == owners).all()):
        raise ValueError("owners: expected every owner to own its own cells (owners[owners[b]] == owners[b])")
    sharer = owners != torch.arange(batch, device=owners.device)  # [B]
    cols = torch.arange(seq, device=owners.device)
    return (sharer[:, None] & (cols[None, :] < shared.to(owners.device)[:, None])).reshape(-1)
