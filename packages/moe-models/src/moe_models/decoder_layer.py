"""One pre-norm decoder layer: attention then a dense MLP or a sparse MoE block."""

from __future__ import annotations

import torch
from torch import nn

from moe_models.attention import Attention
from moe_models.config import MoEConfig
from moe_models.moe import DenseMLP, SparseMoeBlock
from moe_models.norm import RMSNorm
from moe_models.token_layout import TokenLayout


class DecoderLayer(nn.Module):
    def __init__(self, config: MoEConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.is_moe = config.is_moe_layer(layer_idx)
        self.self_attn = Attention(config)
        self.mlp: SparseMoeBlock | DenseMLP = SparseMoeBlock(config) if self.is_moe else DenseMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        mask: torch.Tensor,
        layout: TokenLayout,
        replay_ids: torch.Tensor | None = None,
        replay_mask: torch.Tensor | None = None,
        outputs: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """h: [N, hidden] the layout's tokens -> (h [M, hidden], expert ids [M, K] or None for a dense layer);
        replay_ids [N, K] / replay_mask [N] as in `TopKRouter.forward`. `outputs` [M] int64: the tokens (of the N,
        ascending) whose output is wanted, the others only lend their keys and values (None: all, M = N)."""
        h_out = h if outputs is None else h.index_select(0, outputs)
        h = h_out + self.self_attn(self.input_layernorm(h), cos, signed_sin, mask, layout, outputs)
        if outputs is not None and replay_ids is not None and replay_mask is not None:
            replay_ids, replay_mask = replay_ids.index_select(0, outputs), replay_mask.index_select(0, outputs)
        return self.feed_forward(h, replay_ids, replay_mask)

    def feed_forward(
        self,
        h: torch.Tensor,
        replay_ids: torch.Tensor | None = None,
        replay_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The layer's second half on the residual after attention, h [..., hidden] -> (h + mlp(post-norm(h)) in
        h's shape, expert ids [tokens, K] (h's leading dims flattened) or None for a dense layer). replay_ids [tokens,
        K] / replay_mask [tokens]: as in `TopKRouter.forward`."""
        x = self.post_attention_layernorm(h)
        if isinstance(self.mlp, DenseMLP):
            return h + self.mlp(x), None
        flat = x.reshape(-1, x.shape[-1])
        out, ids = self.mlp(flat, replay_ids, replay_mask)
        return h + out.view_as(h), ids
