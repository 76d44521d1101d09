"""One pre-norm decoder layer: attention (GQA or MLA) then a dense MLP or a sparse MoE block."""

from __future__ import annotations

import torch
from torch import nn

from moe_models.attention import Attention
from moe_models.config import MoEConfig
from moe_models.forward_context import ForwardContext
from moe_models.mla import LatentAttention
from moe_models.moe import DenseMLP, SparseMoeBlock
from moe_models.norm import RMSNorm


class DecoderLayer(nn.Module):
    def __init__(self, config: MoEConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.is_moe = config.is_moe_layer(layer_idx)
        self.self_attn: Attention | LatentAttention = (
            LatentAttention(config, layer_idx) if config.is_mla else Attention(config, layer_idx)
        )
        self.mlp: SparseMoeBlock | DenseMLP = SparseMoeBlock(config, layer_idx) if self.is_moe else DenseMLP(config)
        weight_first = config.traits.norm_weight_first
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, weight_first)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, weight_first)

    def forward(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        ctx: ForwardContext,
        replay: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """h: [N, hidden] the context's tokens -> (h [M, hidden], expert ids [M, K] or None for a dense layer), M the
        rows of `ctx.queries(layer)`; replay (ids [N, K], mask [N]) as in `TopKRouter.forward`."""
        i = self.layer_idx
        outputs = ctx.queries(i)
        residual = h if outputs is None else h.index_select(0, outputs)
        attn = self.self_attn(self.input_layernorm(h), cos, signed_sin, ctx, outputs)  # [M, H * Dv]
        o_proj = self.self_attn.o_proj
        h = ctx.add_linear(i, "attn_out", residual, attn, o_proj.weight, o_proj.bias)
        x = self.post_attention_layernorm(h)
        if isinstance(self.mlp, DenseMLP):
            h, ids = ctx.add_mlp(i, self.mlp, h, x), None
        else:
            if replay is not None and outputs is not None:
                replay = (replay[0].index_select(0, outputs), replay[1].index_select(0, outputs))
            h, ids = self.mlp(x, h, ctx, *(replay or (None, None)))  # records its own mlp_out
        ctx.record(i, "hidden", h)
        return h, ids
