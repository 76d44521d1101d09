"""Cached self-attention of one layer: the new tokens' K/V appended to the slot cache, queries over each slot's prefix.

The model's `Attention` module supplies the projections, q/k norms and rotary (`Attention.project`) and `o_proj`;
only the cache reads and writes live here.
"""

from __future__ import annotations

import torch
from moe_models.attention import Attention

from native_engine.decode.cached_plan import AttentionGroup


def cached_attention(
    attn: Attention,
    h: torch.Tensor,
    cos: torch.Tensor,
    signed_sin: torch.Tensor,
    write_slots: torch.Tensor,
    write_positions: torch.Tensor,
    groups: list[AttentionGroup],
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> torch.Tensor:
    """h: [N, hidden] new tokens of all chunks (normed). Writes their K/V at (write_slots, write_positions) of the
    [slots, KVH, max_len, D] caches, then lets each group attend over its slots' filled prefix only.
    Returns o_proj of the attention output, [N, hidden]."""
    q, k, v = attn.project(h, cos, signed_sin)  # [N, H, D], [N, KVH, D], [N, KVH, D]
    k_cache[write_slots, :, write_positions] = k.to(k_cache.dtype)
    v_cache[write_slots, :, write_positions] = v.to(v_cache.dtype)
    width = attn.num_heads * attn.head_dim
    if len(groups) == 1 and groups[0].is_identity:
        out = _attend_group(attn, q, groups[0], k_cache, v_cache)
        return attn.o_proj(out.reshape(-1, width))
    out = q.new_empty(q.shape[0], width)
    for group in groups:
        rows = _attend_group(attn, q, group, k_cache, v_cache)  # [S_g, Q_g, H*D]
        out[group.token_index[group.query_valid]] = rows.reshape(*group.token_index.shape, width)[group.query_valid]
    return attn.o_proj(out)


def _attend_group(
    attn: Attention, q: torch.Tensor, group: AttentionGroup, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> torch.Tensor:
    """Returns [S_g, Q_g, H * D]. Query heads are folded as [KVH, group_size * Q_g] so keys are not copied
    per query head."""
    slots, queries = group.token_index.shape
    qg = q.view(slots, queries, *q.shape[1:]) if group.is_identity else q[group.token_index]  # [S_g, Q_g, H, D]
    qg = qg.view(slots, queries, attn.num_kv_heads, attn.group_size, attn.head_dim)
    qg = qg.permute(0, 2, 3, 1, 4).reshape(slots, attn.num_kv_heads, attn.group_size * queries, -1)
    if group.slot_start is not None:
        rows = slice(group.slot_start, group.slot_start + slots)
        keys = k_cache[rows, :, : group.key_len]  # [S_g, KVH, L, D] view
        values = v_cache[rows, :, : group.key_len]
    else:
        keys = k_cache[:, :, : group.key_len].index_select(0, group.slots)
        values = v_cache[:, :, : group.key_len].index_select(0, group.slots)
    scores = torch.matmul(qg, keys.transpose(-1, -2).to(qg.dtype)) * attn.scaling  # [S_g, KVH, G*Q, L]
    scores = scores + group.additive_mask.to(scores.dtype)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(qg.dtype)
    out = torch.matmul(probs, values.to(qg.dtype))  # [S_g, KVH, G*Q, D]
    out = out.view(slots, attn.num_kv_heads, attn.group_size, queries, attn.head_dim)
    return out.permute(0, 3, 1, 2, 4).reshape(slots, queries, attn.num_heads * attn.head_dim)
