"""GridContext: the training forward's context, whole sequences in a right-padded `[B, T]` batch.

Every op but attention runs on the layout's tokens alone (`TokenLayout`: the real tokens, a shared prefix once).
Attention runs on a grid of segments: a segment is a row and the rows that read their prefix from it (a GRPO group's
samples of one prompt), its tokens in slots `0 .. U-1` in layout order, under a mask that lets each query see the
keys of its own row (the shared prefix included) at or before its position. Without shared prefixes a segment is a
row and the grid is the `[B, T]` batch under the causal and padding mask; either way no real query attends to
padding or to another row's tokens.
"""

from __future__ import annotations

import torch

from moe_models.attention_ops import band, softmax_attention
from moe_models.forward_context import AttentionModule, ForwardContext, TraceHook
from moe_models.invariant_ops import invariant_attention
from moe_models.replay import RouterReplay
from moe_models.segment_grid import SegmentGrid, keep_a_key
from moe_models.token_layout import TokenLayout


class GridContext(ForwardContext):
    """`last_layer_queries` `[M]` (of the layout's N tokens, ascending): the rows the last layer computes (None:
    all); `replay`: the routing to force, `[B, T, L_moe, K]` as `RouterReplay`; `owners` and `shared` `[B]` as
    `TokenLayout.of` took them (None: no shared prefixes)."""

    def __init__(
        self,
        layout: TokenLayout,
        *,
        last_layer: int,
        last_layer_queries: torch.Tensor | None = None,
        replay: RouterReplay | None = None,
        owners: torch.Tensor | None = None,
        shared: torch.Tensor | None = None,
        invariant: bool = False,
        trace: TraceHook | None = None,
    ) -> None:
        super().__init__(layout.positions, invariant=invariant, trace=trace)
        self.layout = layout
        self.grid = SegmentGrid.of(layout, owners, shared)
        self.last_layer = last_layer
        self.last_layer_queries = last_layer_queries
        self._replay = replay
        self._replay_mask = None if replay is None else layout.pack(replay.mask)  # [N]
        self._banded: dict[int, torch.Tensor] = {}  # sliding window -> its mask

    def queries(self, layer: int) -> torch.Tensor | None:
        return self.last_layer_queries if layer == self.last_layer else None

    def replay(self, moe_ordinal: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self._replay is None or self._replay_mask is None:
            return None
        return self.layout.pack(self._replay.ids[:, :, moe_ordinal]).long(), self._replay_mask  # [N, K], [N]

    def attend(
        self, layer: int, attn: AttentionModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """Scores on the segment grid `[S, U]`: empty slots and unwanted queries hold zeros, and no real query
        attends to an empty slot, another row's token (nor, in a sliding layer, to keys beyond its window)."""
        grid = self.grid
        wanted = self.queries(layer)
        q = grid.gather(q, wanted)  # [S, H, U, Dk]
        k, v = grid.gather(k), grid.gather(v)  # [S, KVH, U, D]
        mask = self._mask(attn.sliding_window)  # [S, 1, U, U]
        if self.invariant:
            out = invariant_attention(q, k, v, mask[:, 0], attn.scaling, attn.sinks)
        else:
            out = softmax_attention(q, k, v, mask, attn.scaling, attn.sinks)  # [S, H, U, Dv]
        out = out.transpose(1, 2).reshape(grid.segments * grid.slots, attn.num_heads * attn.value_dim)
        return out.index_select(0, grid.home if wanted is None else grid.home.index_select(0, wanted))

    def _mask(self, window: int | None) -> torch.Tensor:
        if window is None:
            return self.grid.mask
        if window not in self._banded:
            pos = self.grid.positions  # [S, U]
            self._banded[window] = keep_a_key(band(self.grid.mask, pos[:, None, :], pos[:, None, None, :], window))
        return self._banded[window]
