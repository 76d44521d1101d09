"""TokenLayout: which cells of a `[B, T]` batch hold real tokens, so that every op but attention runs on those alone."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenLayout:
    """The real tokens of a `[batch, seq]` grid, row-major: `index` `[N]` int64 cells of the flattened grid (None:
    every cell is real, N = batch * seq), `positions` `[N]` int64 column of each (its rotary position), `rows` `[N]`
    int64 row of each.

    `pack` and `unpack` move a per-token tensor between the grid `[B, T, ...]` and the packed `[N, ...]` form; a
    padding cell unpacks as zeros. A per-token op computes each row from that row alone, so a packed forward gives
    every real token the padded forward's values (to float rounding: a matmul's rounding may depend on its row
    count) without computing the padding.
    """

    batch: int
    seq: int
    index: torch.Tensor | None
    positions: torch.Tensor
    rows: torch.Tensor

    @classmethod
    def of(cls, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> TokenLayout:
        """input_ids `[B, T]`; attention_mask `[B, T]` (nonzero = real token) or None (every token real)."""
        batch, seq = input_ids.shape
        columns = torch.arange(seq, device=input_ids.device).repeat(batch)  # [B*T]
        rows = torch.arange(batch, device=input_ids.device).repeat_interleave(seq)  # [B*T]
        if attention_mask is None:
            return cls(batch, seq, None, columns, rows)
        if tuple(attention_mask.shape) != (batch, seq):
            raise ValueError(f"attention_mask: got shape {tuple(attention_mask.shape)}, expected {(batch, seq)}")
        real = attention_mask.reshape(-1).to(torch.bool)
        if bool(real.all()):
            return cls(batch, seq, None, columns, rows)
        index = real.nonzero().squeeze(1)  # [N]
        return cls(batch, seq, index, columns.index_select(0, index), rows.index_select(0, index))

    def subset(self, keep: torch.Tensor) -> TokenLayout:
        """The layout of this layout's tokens `keep` `[M]` int64 (indices into its N tokens, ascending)."""
        index = keep if self.index is None else self.index.index_select(0, keep)
        return TokenLayout(
            self.batch, self.seq, index, self.positions.index_select(0, keep), self.rows.index_select(0, keep)
        )

    @property
    def num_tokens(self) -> int:
        return self.batch * self.seq if self.index is None else int(self.index.numel())

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, T, ...]` -> `[N, ...]`."""
        flat = x.reshape(self.batch * self.seq, *x.shape[2:])
        return flat if self.index is None else flat.index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """`[N, ...]` -> `[B, T, ...]`, zeros at padding cells."""
        if self.index is not None:
            x = x.new_zeros(self.batch * self.seq, *x.shape[1:]).index_copy(0, self.index, x)
        return x.view(self.batch, self.seq, *x.shape[1:])
