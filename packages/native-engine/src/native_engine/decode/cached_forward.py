"""The general cached forward over a model's modules: chunks of any length appended to their slots in one call.

Reads the model's submodules and parameters, never changes them; the cache is mutated in place. Same math as
`MoEForCausalLM.forward` on each slot's whole sequence (to float rounding, ~1e-7 in fp32) with the same routing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from moe_models import MoEForCausalLM
from moe_models.decoder_layer import DecoderLayer
from moe_models.moe import DenseMLP

from native_engine.decode.cached_attention import cached_attention
from native_engine.decode.cached_plan import CachedBatchPlan, build_plan
from native_engine.decode.kv_cache import KVCache

RoutedExperts = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(x normed [N, hidden], h residual [N, hidden], expert ids [N, K], gate weights [N, K]) -> h + experts(x)."""


def stack_routing(routed: list[torch.Tensor], num_tokens: int, top_k: int, device: torch.device) -> torch.Tensor:
    """[num_tokens, L_moe, K] int64 from per-MoE-layer [num_tokens, K] ids (L_moe may be 0)."""
    if not routed:
        return torch.zeros(num_tokens, 0, top_k, dtype=torch.int64, device=device)
    return torch.stack(routed, dim=1)


def check_call_shape(
    model: MoEForCausalLM, input_ids: torch.Tensor, slot_ids: torch.Tensor, query_lens: list[int], cache: KVCache
) -> list[int]:
    """Validates a cached call's shapes and slots (not the lengths); returns slot_ids as a list."""
    cfg = model.config
    if input_ids.dim() != 1 or slot_ids.dim() != 1:
        raise ValueError(
            f"input_ids/slot_ids: got shapes {tuple(input_ids.shape)}/{tuple(slot_ids.shape)}, expected 1-D"
        )
    if len(query_lens) != slot_ids.numel() or len(query_lens) == 0:
        raise ValueError(f"query_lens: got {len(query_lens)} entries, expected {slot_ids.numel()} (>= 1)")
    if min(query_lens) < 1 or sum(query_lens) != input_ids.numel():
        raise ValueError(
            f"query_lens: got {query_lens} (sum {sum(query_lens)}), expected entries >= 1 summing to "
            f"N={input_ids.numel()}"
        )
    if (
        cache.keys[0].shape[1:] != (cfg.num_key_value_heads, cache.max_len, cfg.head_dim)
        or len(cache.keys) != cfg.num_hidden_layers
    ):
        raise ValueError("cache: built for a different model config")
    slots = slot_ids.tolist()
    if len(set(slots)) != len(slots) or min(slots) < 0 or max(slots) >= cache.num_slots:
        raise ValueError(f"slot_ids: got {slots}, expected distinct slots in [0, {cache.num_slots})")
    return slots


def check_lengths(slot_ids: torch.Tensor, slots: list[int], query_lens: list[int], cache: KVCache) -> list[int]:
    """Raises ValueError if a chunk would overflow max_len; returns the slots' current lengths."""
    starts = cache.lengths[slot_ids.to(cache.device)].tolist()
    for slot, start, n in zip(slots, starts, query_lens, strict=True):
        if start + n > cache.max_len:
            raise ValueError(
                f"slot {slot}: got {start} cached + {n} new tokens = {start + n}, expected <= max_len {cache.max_len}"
            )
    return starts


def layer_forward(
    layer: DecoderLayer,
    h: torch.Tensor,
    cos: torch.Tensor,
    signed_sin: torch.Tensor,
    plan: CachedBatchPlan,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    experts: RoutedExperts | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One decoder layer on h [N, hidden] new tokens -> (h [N, hidden], expert ids [N, K] or None). `experts`,
    when given, computes an MoE layer's h + experts(x) from the router's choice instead of the block's own
    experts."""
    attn = cached_attention(
        layer.self_attn,
        layer.input_layernorm(h),
        cos,
        signed_sin,
        plan.write_slots,
        plan.write_positions,
        plan.groups,
        k_cache,
        v_cache,
    )
    h = h + attn
    if experts is None or isinstance(layer.mlp, DenseMLP):
        return layer.feed_forward(h)
    x = layer.post_attention_layernorm(h)
    weights, ids = layer.mlp.gate(x)
    return experts(x, h, ids, weights), ids


def cached_forward(
    model: MoEForCausalLM,
    input_ids: torch.Tensor,
    slot_ids: torch.Tensor,
    slots: list[int],
    query_lens: list[int],
    cache: KVCache,
    experts: list[RoutedExperts | None] | None,
    capture_routing: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Appends each chunk to its slot at positions cache.lengths[slot] .. +len-1 and advances the lengths.

    input_ids: [N] int64, the chunks concatenated; slot_ids: [S] distinct slots (`slots`, validated by
    `check_call_shape`); query_lens: [S], sum N. experts: per layer, a replacement for the MoE block's experts
    (or None for all). Returns (logits of each chunk's last token [S, V] float32, expert ids of every input
    token [N, L_moe, K] int64 or None). Raises ValueError, changing nothing, if a chunk would overflow max_len.
    """
    start_lengths = check_lengths(slot_ids, slots, query_lens, cache)
    cfg = model.config
    plan = build_plan(
        slot_ids.to(cache.device), query_lens, start_lengths, cfg.num_attention_heads // cfg.num_key_value_heads
    )
    inner = model.model
    h = inner.embed_tokens(input_ids)  # [N, hidden]
    cos, sin = inner.rotary_emb(plan.write_positions, h.dtype)  # [N, D]
    routed: list[torch.Tensor] = []
    for i, layer in enumerate(inner.layers):
        h, ids = layer_forward(
            layer, h, cos, sin, plan, cache.keys[i], cache.values[i], None if experts is None else experts[i]
        )
        if ids is not None:
            routed.append(ids)
    last = inner.norm(h.index_select(0, plan.last_token_index))  # [S, hidden]
    logits = model.lm_head(last).float()
    cache.lengths.index_copy_(0, slot_ids.to(cache.device), plan.new_lengths)
    if not capture_routing:
        return logits, None
    return logits, stack_routing(routed, input_ids.numel(), cfg.num_experts_per_tok, model.lm_head.weight.device)
