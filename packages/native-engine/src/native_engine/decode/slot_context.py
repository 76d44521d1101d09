"""SlotCacheContext: the engine's forward context for chunks appended to slots of a `KVCache`.

The model's decoder (`MoEForCausalLM.decode`) runs the layers; this context gives it the chunks' rotary positions,
attention over each slot's cached prefix (the new tokens' keys and values are written into the cache first), and,
when the runner chose them, C kernels for the routed experts. In true on-policy mode (`invariant`) attention reads
each chunk's keys with the batch-invariant attention of `moe_models.invariant_ops`, like every other op.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from moe_models.attention import Attention
from moe_models.forward_context import ForwardContext
from moe_models.invariant_ops import invariant_attention
from moe_models.moe import Experts

from native_engine.decode.cached_plan import AttentionGroup, CachedBatchPlan
from native_engine.decode.kv_cache import KVCache

RoutedExperts = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(x normed [N, hidden], h residual [N, hidden], expert ids [N, K], gate weights [N, K]) -> h + experts(x)."""


class SlotCacheContext(ForwardContext):
    """`experts`: per layer, a replacement for the MoE block's experts (None: the model's own, for every layer)."""

    def __init__(
        self,
        plan: CachedBatchPlan,
        cache: KVCache,
        experts: list[RoutedExperts | None] | None = None,
        *,
        invariant: bool = False,
    ) -> None:
        super().__init__(plan.write_positions, invariant=invariant)
        self.plan = plan
        self.cache = cache
        self.experts = experts

    def attend(self, layer: int, attn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Writes k and v at each new token's cell of layer `layer`, then each group attends over its slots' filled
        prefix only. q [N, H, D] -> [N, H * D]."""
        plan = self.plan
        k_cache, v_cache = self.cache.keys[layer], self.cache.values[layer]
        k_cache[plan.write_slots, :, plan.write_positions] = k.to(k_cache.dtype)
        v_cache[plan.write_slots, :, plan.write_positions] = v.to(v_cache.dtype)
        width = attn.num_heads * attn.head_dim
        attend = _invariant_group if self.invariant else _attend_group
        groups = plan.groups
        if len(groups) == 1 and groups[0].is_identity:
            return attend(attn, q, groups[0], k_cache, v_cache).reshape(-1, width)
        out = q.new_empty(q.shape[0], width)
        for group in groups:
            rows = attend(attn, q, group, k_cache, v_cache)  # [S_g, Q_g, H*D]
            out[group.token_index[group.query_valid]] = rows.reshape(*group.token_index.shape, width)[group.query_valid]
        return out

    def add_experts(
        self, layer: int, experts: Experts, h: torch.Tensor, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        kernel = None if self.experts is None else self.experts[layer]
        if kernel is None:
            return super().add_experts(layer, experts, h, x, ids, weights)
        return kernel(x, h, ids, weights)


def _group_keys(
    group: AttentionGroup, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The group's slots' keys and values 0 .. key_len - 1, [S_g, KVH, L, D] each (a view when the slots are a
    range)."""
    if group.slot_start is not None:
        rows = slice(group.slot_start, group.slot_start + group.slots.numel())
        return k_cache[rows, :, : group.key_len], v_cache[rows, :, : group.key_len]
    keys = k_cache[:, :, : group.key_len].index_select(0, group.slots)
    return keys, v_cache[:, :, : group.key_len].index_select(0, group.slots)


def _group_queries(q: torch.Tensor, group: AttentionGroup) -> torch.Tensor:
    """[S_g, Q_g, H, D] of q [N, H, D]."""
    slots, queries = group.token_index.shape
    return q.view(slots, queries, *q.shape[1:]) if group.is_identity else q[group.token_index]


def _attend_group(
    attn: Attention, q: torch.Tensor, group: AttentionGroup, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> torch.Tensor:
    """Returns [S_g, Q_g, H * D]. Query heads are folded as [KVH, group_size * Q_g] so keys are not copied
    per query head."""
    slots, queries = group.token_index.shape
    qg = _group_queries(q, group).view(slots, queries, attn.num_kv_heads, attn.group_size, attn.head_dim)
    qg = qg.permute(0, 2, 3, 1, 4).reshape(slots, attn.num_kv_heads, attn.group_size * queries, -1)
    keys, values = _group_keys(group, k_cache, v_cache)
    scores = torch.matmul(qg, keys.transpose(-1, -2).to(qg.dtype)) * attn.scaling  # [S_g, KVH, G*Q, L]
    scores = scores + group.additive_mask.to(scores.dtype)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(qg.dtype)
    out = torch.matmul(probs, values.to(qg.dtype))  # [S_g, KVH, G*Q, D]
    out = out.view(slots, attn.num_kv_heads, attn.group_size, queries, attn.head_dim)
    return out.permute(0, 3, 1, 2, 4).reshape(slots, queries, attn.num_heads * attn.head_dim)


def _invariant_group(
    attn: Attention, q: torch.Tensor, group: AttentionGroup, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> torch.Tensor:
    """`_attend_group` by `invariant_attention`: each query row's result is the trainer's for the same sequence."""
    slots, queries = group.token_index.shape
    qg = _group_queries(q, group).transpose(1, 2)  # [S_g, H, Q_g, D]
    keys, values = (t.to(qg.dtype) for t in _group_keys(group, k_cache, v_cache))  # [S_g, KVH, L, D]
    out = invariant_attention(qg, keys, values, group.allowed, attn.scaling)  # [S_g, H, Q_g, D]
    return out.transpose(1, 2).reshape(slots, queries, attn.num_heads * attn.head_dim)
