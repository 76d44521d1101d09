"""Grouped-query self-attention with per-head q/k RMSNorm and rotary embedding (Qwen3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from moe_models.cached_plan import AttentionGroup
from moe_models.config import MoEConfig
from moe_models.norm import RMSNorm
from moe_models.rope import apply_rotary


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
        lead = h.shape[:-1]
        q = self.q_norm(self.q_proj(h).view(*lead, self.num_heads, self.head_dim))
        k = self.k_norm(self.k_proj(h).view(*lead, self.num_kv_heads, self.head_dim))
        v = self.v_proj(h).view(*lead, self.num_kv_heads, self.head_dim)
        return apply_rotary(q, cos, signed_sin), apply_rotary(k, cos, signed_sin), v

    def forward(self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """h: [B, T, hidden]; cos/signed_sin: [B or 1, T, D]; mask: bool [B, 1, T, T], True = may attend."""
        batch, seq, _ = h.shape
        q, k, v = self.project(h, cos, signed_sin)
        q = q.transpose(1, 2)  # [B, H, T, D]
        k = k.transpose(1, 2).repeat_interleave(self.group_size, dim=1)  # [B, H, T, D]
        v = v.transpose(1, 2).repeat_interleave(self.group_size, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim))

    def forward_cached(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        write_slots: torch.Tensor,
        write_positions: torch.Tensor,
        groups: list[AttentionGroup],
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        """h: [N, hidden] new tokens of all chunks. Writes their K/V at (write_slots, write_positions) of the
        [slots, KVH, max_len, D] caches, then lets each group attend over its slots' filled prefix only."""
        q, k, v = self.project(h, cos, signed_sin)  # [N, H, D], [N, KVH, D], [N, KVH, D]
        k_cache[write_slots, :, write_positions] = k.to(k_cache.dtype)
        v_cache[write_slots, :, write_positions] = v.to(v_cache.dtype)
        width = self.num_heads * self.head_dim
        if len(groups) == 1 and groups[0].is_identity:
            out = self._attend_group(q, groups[0], k_cache, v_cache)
            return self.o_proj(out.reshape(-1, width))
        out = q.new_empty(q.shape[0], width)
        for group in groups:
            rows = self._attend_group(q, group, k_cache, v_cache)  # [S_g, Q_g, H*D]
            out[group.token_index[group.query_valid]] = rows.reshape(*group.token_index.shape, width)[group.query_valid]
        return self.o_proj(out)

    def _attend_group(
        self, q: torch.Tensor, group: AttentionGroup, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        """Returns [S_g, Q_g, H * D]. Query heads are folded as [KVH, group_size * Q_g] so keys are not copied
        per query head."""
        slots, queries = group.token_index.shape
        qg = q.view(slots, queries, *q.shape[1:]) if group.is_identity else q[group.token_index]  # [S_g, Q_g, H, D]
        qg = qg.view(slots, queries, self.num_kv_heads, self.group_size, self.head_dim)
        qg = qg.permute(0, 2, 3, 1, 4).reshape(slots, self.num_kv_heads, self.group_size * queries, -1)
        if group.slot_start is not None:
            rows = slice(group.slot_start, group.slot_start + slots)
            keys = k_cache[rows, :, : group.key_len]  # [S_g, KVH, L, D] view
            values = v_cache[rows, :, : group.key_len]
        else:
            keys = k_cache[:, :, : group.key_len].index_select(0, group.slots)
            values = v_cache[:, :, : group.key_len].index_select(0, group.slots)
        scores = torch.matmul(qg, keys.transpose(-1, -2).to(qg.dtype)) * self.scaling  # [S_g, KVH, G*Q, L]
        scores = scores + group.additive_mask.to(scores.dtype)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(qg.dtype)
        out = torch.matmul(probs, values.to(qg.dtype))  # [S_g, KVH, G*Q, D]
        out = out.view(slots, self.num_kv_heads, self.group_size, queries, self.head_dim)
        return out.permute(0, 3, 1, 2, 4).reshape(slots, queries, self.num_heads * self.head_dim)
