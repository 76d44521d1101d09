"""Self-attention of the GQA families: q/k/v projections (optional biases), optional per-head q/k RMSNorm (Qwen3),
rotary embedding, optional learned sinks (GPT-OSS) and an optional sliding window per layer."""

from __future__ import annotations

import torch
from torch import nn

from moe_models.config import MoEConfig
from moe_models.forward_context import ForwardContext
from moe_models.norm import RMSNorm
from moe_models.rope import apply_rotary


class SelfAttention(nn.Module):
    """What every attention module shares: its forward asks the context for q, k, v (`ForwardContext.project`,
    which calls the module's `query` / `key_value`) and for attention over the keys (`ForwardContext.attend`)."""

    layer_idx: int

    def forward(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        ctx: ForwardContext,
        queries: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """h: [N, hidden] the context's tokens (normed); cos/signed_sin: [N, rotary dim]; queries: [M] int64 the
        tokens (of the N, ascending) whose output is wanted (None: all). Returns the attention output before
        `o_proj`, [M, H * value_dim] (M = N without `queries`); how the keys are found is the context's
        (`ForwardContext.attend`)."""
        q, k, v = ctx.project(self, h, cos, signed_sin, queries)  # type: ignore[arg-type]  # [M|N, heads, dim]
        return ctx.attend(self.layer_idx, self, q, k, v)  # type: ignore[arg-type]


class Attention(SelfAttention):
    """Query head h reads key/value head h // (num_attention_heads // num_key_value_heads).

    `sinks` `[H]` (GPT-OSS): each head's softmax over keys has one more logit, the sink, that takes weight but adds
    no value. `sliding_window` W: a query at position p sees keys p - W + 1 .. p (None: every earlier key)."""

    def __init__(self, config: MoEConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.value_dim = config.head_dim
        self.group_size = self.num_heads // self.num_kv_heads
        self.scaling = self.head_dim**-0.5
        self.sliding_window = config.sliding_window if config.is_sliding(layer_idx) else None
        hidden, d, bias = config.hidden_size, config.head_dim, config.attention_bias
        self.q_proj = nn.Linear(hidden, self.num_heads * d, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * d, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * d, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * d, hidden, bias=config.o_proj_bias)
        traits = config.traits
        self.q_norm = RMSNorm(d, config.rms_norm_eps) if traits.qk_norm else None
        self.k_norm = RMSNorm(d, config.rms_norm_eps) if traits.qk_norm else None
        self.sinks = nn.Parameter(torch.zeros(self.num_heads)) if traits.sinks else None

    def query(self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """Rotated q [..., H, D] of h [..., hidden]."""
        q = ctx.linear(h, self.q_proj.weight, self.q_proj.bias).view(*h.shape[:-1], self.num_heads, self.head_dim)
        if self.q_norm is not None:
            q = self.q_norm(q)
        return apply_rotary(q, cos, signed_sin)

    def key_value(
        self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, ctx: ForwardContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated k [..., KVH, D] and v [..., KVH, D] of h [..., hidden]."""
        lead = h.shape[:-1]
        k = ctx.linear(h, self.k_proj.weight, self.k_proj.bias).view(*lead, self.num_kv_heads, self.head_dim)
        if self.k_norm is not None:
            k = self.k_norm(k)
        v = ctx.linear(h, self.v_proj.weight, self.v_proj.bias).view(*lead, self.num_kv_heads, self.head_dim)
        return apply_rotary(k, cos, signed_sin), v
