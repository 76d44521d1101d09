"""Grouped-query self-attention with per-head q/k RMSNorm and rotary embedding (Qwen3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from moe_models.config import MoEConfig
from moe_models.norm import RMSNorm
from moe_models.rope import apply_rotary
from moe_models.token_layout import TokenLayout


class Attention(nn.Module):
    """Query head h reads key/value head h // (num_attention_heads // num_key_value_heads)."""

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
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

    def project(
        self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """h: [..., hidden]; cos/signed_sin: [..., head_dim] from RotaryEmbedding.

        Returns rotated q [..., H, D] and k [..., KVH, D], and v [..., KVH, D]."""
        return (self.query(h, cos, signed_sin), *self.key_value(h, cos, signed_sin))

    def query(self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
        """Rotated q [..., H, D] of h [..., hidden]."""
        q = self.q_norm(self.q_proj(h).view(*h.shape[:-1], self.num_heads, self.head_dim))
        return apply_rotary(q, cos, signed_sin)

    def key_value(
        self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated k [..., KVH, D] and v [..., KVH, D] of h [..., hidden]."""
        lead = h.shape[:-1]
        k = self.k_norm(self.k_proj(h).view(*lead, self.num_kv_heads, self.head_dim))
        v = self.v_proj(h).view(*lead, self.num_kv_heads, self.head_dim)
        return apply_rotary(k, cos, signed_sin), v

    def forward(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        mask: torch.Tensor,
        layout: TokenLayout,
        queries: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """h: [N, hidden] the layout's tokens; cos/signed_sin: [N, D]; mask: bool [B, 1, T, T], True = may attend;
        queries: [M] int64 the tokens (of the N, ascending) whose output is wanted (None: all).

        Projections run on the tokens; scores run on the [B, T] grid (padding cells and unwanted queries hold
        zeros, and no real query attends to padding). Returns [M, hidden] (M = N without `queries`)."""
        asked = layout if queries is None else layout.subset(queries)
        rows = (h, cos, signed_sin) if queries is None else (t.index_select(0, queries) for t in (h, cos, signed_sin))
        q = self.query(*rows)  # [M, H, D]; q before k and v, as `project` orders them
        k, v = self.key_value(h, cos, signed_sin)  # [N, KVH, D] each
        q = asked.unpack(q).transpose(1, 2)  # [B, H, T, D]
        k = layout.unpack(k).transpose(1, 2).repeat_interleave(self.group_size, dim=1)  # [B, H, T, D]
        v = layout.unpack(v).transpose(1, 2).repeat_interleave(self.group_size, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)  # [B, H, T, D]
        out = out.transpose(1, 2).reshape(layout.batch, layout.seq, self.num_heads * self.head_dim)
        return self.o_proj(asked.pack(out))
