"""Multi-head latent attention (DeepSeek-V3): queries through a rank-`q_lora_rank` bottleneck (or one projection),
keys and values through a shared rank-`kv_lora_rank` latent, and a decoupled rotary part of `qk_rope_head_dim` dims
that every head's key shares.

Keys and values are expanded per head (key dim `qk_nope_head_dim + qk_rope_head_dim`, value dim `v_head_dim`), so a
context attends over them as over any multi-head attention with as many KV heads as query heads."""

from __future__ import annotations

import math

import torch
from torch import nn

from moe_models.attention import SelfAttention
from moe_models.config import MoEConfig
from moe_models.forward_context import ForwardContext
from moe_models.norm import RMSNorm
from moe_models.rope import apply_rotary, apply_rotary_interleaved

LATENT_NORM_EPS = 1e-6  # transformers builds the two latent norms with its RMSNorm default, not rms_norm_eps


class LatentAttention(SelfAttention):
    def __init__(self, config: MoEConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = self.num_kv_heads = config.num_attention_heads
        self.group_size = 1
        self.nope_dim, self.rope_dim = config.qk_nope_head_dim, config.qk_rope_head_dim
        self.head_dim = config.key_dim  # query and key dim per head
        self.value_dim = config.v_head_dim
        self.kv_lora_rank = config.kv_lora_rank
        self.scaling = self.head_dim**-0.5 * _yarn_mscale_squared(config)
        self.sliding_window: int | None = None
        self.sinks: nn.Parameter | None = None
        self.interleaved = config.rope_interleave
        hidden, heads = config.hidden_size, self.num_heads
        if config.q_lora_rank is None:
            self.q_proj: nn.Linear | None = nn.Linear(hidden, heads * self.head_dim, bias=False)
            self.q_a_proj = self.q_a_layernorm = self.q_b_proj = None
        else:
            self.q_proj = None
            self.q_a_proj = nn.Linear(hidden, config.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(config.q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = nn.Linear(config.q_lora_rank, heads * self.head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.kv_lora_rank + self.rope_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, heads * (self.nope_dim + self.value_dim), bias=False)
        self.o_proj = nn.Linear(heads * self.value_dim, hidden, bias=False)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
        return (apply_rotary_interleaved if self.interleaved else apply_rotary)(x, cos, signed_sin)

    def query(self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """q [..., H, nope + rope] of h [..., hidden], its rope part rotated."""
        if self.q_proj is not None:
            q = ctx.linear(h, self.q_proj.weight)
        else:  # the low-rank path: q_a_proj, q_a_layernorm and q_b_proj exist (__init__)
            latent = self.q_a_layernorm(ctx.linear(h, self.q_a_proj.weight))  # type: ignore[misc, union-attr]
            q = ctx.linear(latent, self.q_b_proj.weight)  # type: ignore[union-attr]
        q = q.view(*h.shape[:-1], self.num_heads, self.head_dim)
        nope, rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        return torch.cat([nope, self._rotate(rope, cos, signed_sin)], dim=-1)

    def key_value(
        self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, ctx: ForwardContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """k [..., H, nope + rope] (the rotated rope part shared by every head) and v [..., H, v_head_dim]."""
        lead = h.shape[:-1]
        latent, k_rope = ctx.linear(h, self.kv_a_proj_with_mqa.weight).split([self.kv_lora_rank, self.rope_dim], -1)
        kv = ctx.linear(self.kv_a_layernorm(latent), self.kv_b_proj.weight).view(*lead, self.num_heads, -1)
        k_nope, v = kv.split([self.nope_dim, self.value_dim], dim=-1)
        k_rope = self._rotate(k_rope.unsqueeze(-2), cos, signed_sin).expand(*lead, self.num_heads, self.rope_dim)
        return torch.cat([k_nope, k_rope], dim=-1), v


def _yarn_mscale_squared(config: MoEConfig) -> float:
    """DeepSeek's YaRN softmax-scale correction (transformers' `yarn_apply_mscale`): mscale(factor, mscale_all_dim)
    squared when `mscale_all_dim` is set, else 1."""
    scaling = config.rope_scaling
    if scaling is None or not scaling.mscale_all_dim or scaling.factor <= 1:
        return 1.0
    mscale = 0.1 * scaling.mscale_all_dim * math.log(scaling.factor) + 1.0
    return mscale * mscale
