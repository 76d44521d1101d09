"""Grouped-query self-attention with per-head q/k RMSNorm and rotary embedding (Qwen3)."""

from __future__ import annotations

import torch
from torch import nn

from moe_models.config import MoEConfig
from moe_models.forward_context import ForwardContext
from moe_models.norm import RMSNorm
from moe_models.rope import apply_rotary


class Attention(nn.Module):
    """Query head h reads key/value head h // (num_attention_heads // num_key_value_heads)."""

    def __init__(self, config: MoEConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.group_size = self.num_heads // self.num_kv_heads
        self.scaling = self.head_dim**-0.5
        hidden, d = config.hidden_size, config.head_dim
        self.q_proj = nn.Linear(hidden, self.num_heads * d, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.num_heads * d, hidden, bias=False)
        self.q_norm = RMSNorm(d, config.rms_norm_eps)
        self.k_norm = RMSNorm(d, config.rms_norm_eps)

    def query(self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """Rotated q [..., H, D] of h [..., hidden]."""
        q = self.q_norm(ctx.linear(h, self.q_proj.weight).view(*h.shape[:-1], self.num_heads, self.head_dim))
        return apply_rotary(q, cos, signed_sin)

    def key_value(
        self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, ctx: ForwardContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated k [..., KVH, D] and v [..., KVH, D] of h [..., hidden]."""
        lead = h.shape[:-1]
        k = self.k_norm(ctx.linear(h, self.k_proj.weight).view(*lead, self.num_kv_heads, self.head_dim))
        v = ctx.linear(h, self.v_proj.weight).view(*lead, self.num_kv_heads, self.head_dim)
        return apply_rotary(k, cos, signed_sin), v

    def forward(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        ctx: ForwardContext,
        queries: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """h: [N, hidden] the context's tokens (normed); cos/signed_sin: [N, D]; queries: [M] int64 the tokens (of
        the N, ascending) whose output is wanted (None: all). Returns the attention output before `o_proj`,
        [M, H * D] (M = N without `queries`); how the keys are found is the context's (`ForwardContext.attend`)."""
        q, k, v = ctx.project(self, h, cos, signed_sin, queries)  # [M, H, D], [N, KVH, D], [N, KVH, D]
        return ctx.attend(self.layer_idx, self, q, k, v)
