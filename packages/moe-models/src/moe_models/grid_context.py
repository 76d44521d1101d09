"""GridContext: the training forward's context, whole sequences in a right-padded `[B, T]` batch.

Every op but attention runs on the real tokens alone (`TokenLayout`); attention runs on the `[B, T]` grid under the
causal and padding mask, so no real query attends to padding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from moe_models.forward_context import ForwardContext, TraceHook
from moe_models.invariant_ops import KEY_CHUNK, invariant_attention
from moe_models.replay import RouterReplay
from moe_models.token_layout import TokenLayout

if TYPE_CHECKING:
    from moe_models.attention import Attention


class GridContext(ForwardContext):
    """`last_layer_queries` `[M]` (of the layout's N tokens, ascending): the rows the last layer computes (None:
    all); `replay`: the routing to force, `[B, T, L_moe, K]` as `RouterReplay`."""

    def __init__(
        self,
        layout: TokenLayout,
        attention_mask: torch.Tensor | None,
        *,
        last_layer: int,
        last_layer_queries: torch.Tensor | None = None,
        replay: RouterReplay | None = None,
        invariant: bool = False,
        trace: TraceHook | None = None,
    ) -> None:
        super().__init__(layout.positions, invariant=invariant, trace=trace)
        self.layout = layout
        self.mask = _attention_mask(layout, attention_mask)  # [B, 1, T, T]
        self.last_layer = last_layer
        self.last_layer_queries = last_layer_queries
        self._replay = replay
        self._replay_mask = None if replay is None else layout.pack(replay.mask)  # [N]

    def queries(self, layer: int) -> torch.Tensor | None:
        return self.last_layer_queries if layer == self.last_layer else None

    def replay(self, moe_ordinal: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self._replay is None or self._replay_mask is None:
            return None
        return self.layout.pack(self._replay.ids[:, :, moe_ordinal]).long(), self._replay_mask  # [N, K], [N]

    def attend(self, layer: int, attn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Scores on the [B, T] grid: padding cells and unwanted queries hold zeros, and no real query attends to
        padding."""
        layout = self.layout
        wanted = self.queries(layer)
        asked = layout if wanted is None else layout.subset(wanted)
        q = asked.unpack(q).transpose(1, 2)  # [B, H, T, D]
        k = layout.unpack(k).transpose(1, 2)  # [B, KVH, T, D]
        v = layout.unpack(v).transpose(1, 2)
        if self.invariant:
            out = invariant_attention(q, k, v, _first_chunk_guard(self.mask[:, 0]), attn.scaling)
        else:
            k, v = (t.repeat_interleave(attn.group_size, dim=1) for t in (k, v))  # [B, H, T, D]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, scale=attn.scaling)  # [B, H, T, D]
        out = out.transpose(1, 2).reshape(layout.batch, layout.seq, attn.num_heads * attn.head_dim)
        return asked.pack(out)


def _attention_mask(layout: TokenLayout, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """[B, 1, T, T] bool, True = may attend."""
    batch, seq = layout.batch, layout.seq
    pos = torch.arange(seq, device=layout.positions.device)
    causal = pos[None, :] <= pos[:, None]  # [T(query), T(key)]
    if attention_mask is None:
        return causal[None, None].expand(batch, 1, seq, seq)
    allowed = causal[None, None] & attention_mask.to(torch.bool)[:, None, None, :]  # [B, 1, T, T]
    # A query with no visible key (only in all-padding rows) sees itself, keeping its softmax finite.
    diagonal = torch.eye(seq, dtype=torch.bool, device=allowed.device)[None, None]
    return allowed | (diagonal & ~allowed.any(dim=-1, keepdim=True))


def _first_chunk_guard(allowed: torch.Tensor) -> torch.Tensor:
    """allowed [B, T, T] with key 0 allowed for every query row that allows no key of the first chunk (padding rows
    only: a real query sees key 0), as `invariant_attention` needs; such rows' outputs are never read."""
    blind = ~allowed[:, :, :KEY_CHUNK].any(dim=-1)  # [B, T]
    if not bool(blind.any()):
        return allowed
    first = torch.zeros_like(allowed)
    first[:, :, 0] = blind
    return allowed | first
