"""SlotCacheContext: the engine's forward context for chunks appended to slots of a `KVCache`.

The model's decoder (`MoEForCausalLM.decode`) runs the layers; this context gives it the chunks' rotary positions,
attention over each slot's cached prefix (the new tokens' keys and values are written into the cache first), and,
when the runner chose them, C kernels for the routed experts. In true on-policy mode (`invariant`) attention reads
each chunk's keys with the batch-invariant attention of `moe_models.invariant_ops`, like every other op.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from moe_models.forward_context import AttentionModule, ForwardContext
from moe_models.invariant_ops import invariant_attention
from moe_models.moe import Experts

from engine_adapters.native.decode.cached_plan import AttentionGroup, CachedBatchPlan
from engine_adapters.native.decode.kv_cache import KVCache

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

    def attend(
        self, layer: int, attn: AttentionModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """Writes k and v at each new token's cell of layer `layer`, then each group attends over its slots' filled
        prefix only (within the layer's sliding window, if any). q [N, H, Dk] -> [N, H * Dv]."""
        plan = self.plan
        k_cache, v_cache = self.cache.keys[layer], self.cache.values[layer]
        k_cache[plan.write_slots, :, plan.write_positions] = k.to(k_cache.dtype)
        v_cache[plan.write_slots, :, plan.write_positions] = v.to(v_cache.dtype)
        width = attn.num_heads * attn.value_dim
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
    attn: AttentionModule, q: torch.Tensor, group: AttentionGroup, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> torch.Tensor:
    """Returns [S_g, Q_g, H * Dv]. Query heads are folded as [KVH, group_size * Q_g] so keys are not copied
    per query head; sinks (if any) join each head's softmax as one more logit."""
    slots, queries = group.token_index.shape
    qg = _group_queries(q, group).view(slots, queries, attn.num_kv_heads, attn.group_size, attn.head_dim)
    qg = qg.permute(0, 2, 3, 1, 4).reshape(slots, attn.num_kv_heads, attn.group_size * queries, -1)
    keys, values = _group_keys(group, k_cache, v_cache)
    scores = torch.matmul(qg, keys.transpose(-1, -2).to(qg.dtype)) * attn.scaling  # [S_g, KVH, G*Q, L]
    scores = scores + group.masks(attn.sliding_window)[0].to(scores.dtype)
    if attn.sinks is None:
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(qg.dtype)
    else:
        sink = attn.sinks.to(scores.dtype).view(attn.num_kv_heads, attn.group_size, 1).expand(-1, -1, queries)
        sink = sink.reshape(1, attn.num_kv_heads, -1, 1).expand(slots, -1, -1, 1)
        logits = torch.cat([scores, sink], dim=-1)
        logits = logits - logits.amax(dim=-1, keepdim=True)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)[..., :-1].to(qg.dtype)
    out = torch.matmul(probs, values.to(qg.dtype))  # [S_g, KVH, G*Q, Dv]
    out = out.view(slots, attn.num_kv_heads, attn.group_size, queries, attn.value_dim)
    return out.permute(0, 3, 1, 2, 4).reshape(slots, queries, attn.num_heads * attn.value_dim)


def _invariant_group(
    attn: AttentionModule, q: torch.Tensor, group: AttentionGroup, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> torch.Tensor:
    """`_attend_group` by `invariant_attention`: each query row's result is the trainer's for the same sequence."""
    slots, queries = group.token_index.shape
    qg = _group_queries(q, group).transpose(1, 2)  # [S_g, H, Q_g, Dk]
    keys, values = (t.to(qg.dtype) for t in _group_keys(group, k_cache, v_cache))  # [S_g, KVH, L, D]
    allowed = group.masks(attn.sliding_window)[1]
    out = invariant_attention(qg, keys, values, allowed, attn.scaling, attn.sinks)  # [S_g, H, Q_g, Dv]
    return out.transpose(1, 2).reshape(slots, queries, attn.num_heads * attn.value_dim)
