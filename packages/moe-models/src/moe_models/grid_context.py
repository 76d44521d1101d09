"""GridContext: the training forward's context, whole sequences in a right-padded `[B, T]` batch.

Every op but attention runs on the real tokens alone (`TokenLayout`); attention runs on the `[B, T]` grid under the
causal and padding mask, so no real query attends to padding.
"""

from __future__ import annotations

import torch

from moe_models.attention_ops import band, softmax_attention
from moe_models.forward_context import AttentionModule, ForwardContext, TraceHook
from moe_models.invariant_ops import invariant_attention
from moe_models.replay import RouterReplay
from moe_models.token_layout import TokenLayout


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
        """Scores on the [B, T] grid: padding cells and unwanted queries hold zeros, and no real query attends to
        padding (nor, in a sliding layer, to keys beyond its window)."""
        layout = self.layout
        wanted = self.queries(layer)
        asked = layout if wanted is None else layout.subset(wanted)
        q = asked.unpack(q).transpose(1, 2)  # [B, H, T, Dk]
        k = layout.unpack(k).transpose(1, 2)  # [B, KVH, T, Dk]
        v = layout.unpack(v).transpose(1, 2)  # [B, KVH, T, Dv]
        mask = self._mask(attn.sliding_window)  # [B, 1, T, T]
        if self.invariant:
            out = invariant_attention(q, k, v, mask[:, 0], attn.scaling, attn.sinks)
        else:
            out = softmax_attention(q, k, v, mask, attn.scaling, attn.sinks)  # [B, H, T, Dv]
        out = out.transpose(1, 2).reshape(layout.batch, layout.seq, attn.num_heads * attn.value_dim)
        return asked.pack(out)

    def _mask(self, window: int | None) -> torch.Tensor:
        if window is None:
            return self.mask
        if window not in self._banded:
            pos = torch.arange(self.layout.seq, device=self.mask.device)
            self._banded[window] = _keep_a_key(band(self.mask, pos, pos, window))
        return self._banded[window]


def _attention_mask(layout: TokenLayout, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """[B, 1, T, T] bool, True = may attend."""
    batch, seq = layout.batch, layout.seq
    pos = torch.arange(seq, device=layout.positions.device)
    causal = pos[None, :] <= pos[:, None]  # [T(query), T(key)]
    if attention_mask is None:
        return causal[None, None].expand(batch, 1, seq, seq)
    allowed = causal[None, None] & attention_mask.to(torch.bool)[:, None, None, :]  # [B, 1, T, T]
    return _keep_a_key(allowed)


def _keep_a_key(allowed: torch.Tensor) -> torch.Tensor:
    """allowed `[..., T(query), T(key)]` with each query that allows no key given its own (only padding queries have
    none), keeping every softmax finite."""
    diagonal = torch.eye(allowed.shape[-1], dtype=torch.bool, device=allowed.device)
    return allowed | (diagonal & ~allowed.any(dim=-1, keepdim=True))
