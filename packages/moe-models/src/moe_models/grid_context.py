"""GridContext: the training forward's context, whole sequences in a right-padded `[B, T]` batch.

Every op but attention runs on the layout's tokens alone (`TokenLayout`: the real tokens, a shared prefix once).
Attention runs on a grid of segments: a segment is a row and the rows that read their prefix from it (a GRPO group's
samples of one prompt), its tokens in slots `0 .. U-1` in layout order, under a mask that lets each query see the
keys of its own row (the shared prefix included) at or before its position. Without shared prefixes a segment is a
row and the grid is the `[B, T]` batch under the causal and padding mask; either way no real query attends to
padding or to another row's tokens. The grid's segments are cut into blocks of similar length (`LengthBlocks`), each
attended on its own, so a short row is not padded to the batch's longest (invariant mode keeps one block).
"""

from __future__ import annotations

import torch

from moe_models.attention_ops import softmax_attention
from moe_models.forward_context import AttentionModule, ForwardContext, TraceHook
from moe_models.invariant_ops import invariant_attention
from moe_models.replay import RouterReplay
from moe_models.segment_grid import SegmentGrid
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
        self.grid = SegmentGrid.of(layout, owners, shared, blocked=not invariant)
        self.last_layer = last_layer
        self.last_layer_queries = last_layer_queries
        self._replay = replay
        self._replay_mask = None if replay is None else layout.pack(replay.mask)  # [N]
        self._banded: dict[int | None, tuple[torch.Tensor, ...]] = {}  # sliding window -> each block's mask

    def queries(self, layer: int) -> torch.Tensor | None:
        return self.last_layer_queries if layer == self.last_layer else None

    def replay(self, moe_ordinal: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self._replay is None or self._replay_mask is None:
            return None
        return self.layout.pack(self._replay.ids[:, :, moe_ordinal]).long(), self._replay_mask  # [N, K], [N]

    def attend(
        self, layer: int, attn: AttentionModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """Scores on each block of the segment grid `[S, U]`: empty slots and unwanted queries hold zeros, and no
        real query attends to an empty slot, another row's token (nor, in a sliding layer, to keys beyond its
        window)."""
        grid = self.grid
        wanted = self.queries(layer)
        qs = grid.gather(q, wanted)  # per block [S, H, U, Dk]
        ks, vs = grid.gather(k), grid.gather(v)  # per block [S, KVH, U, D]
        outs = []
        masks = self._masks(attn.sliding_window)  # per block [S, 1, U, U]
        for q, k, v, mask in zip(qs, ks, vs, masks, strict=True):
            if self.invariant:
                outs.append(invariant_attention(q, k, v, mask[:, 0], attn.scaling, attn.sinks))
            else:
                outs.append(softmax_attention(q, k, v, mask, attn.scaling, attn.sinks))  # [S, H, U, Dv]
        return grid.scatter(outs, wanted)  # [M, H * Dv]

    def _masks(self, window: int | None) -> tuple[torch.Tensor, ...]:
        if window not in self._banded:
            self._banded[window] = tuple(block.banded(window) for block in self.grid.blocks)
        return self._banded[window]
