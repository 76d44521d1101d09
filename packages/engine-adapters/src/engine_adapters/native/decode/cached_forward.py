"""The general cached forward: chunks of any length appended to their slots in one call, run by the model's own
decoder (`MoEForCausalLM.decode`) under a `SlotCacheContext`.

Reads the model's parameters, never changes them; the cache is mutated in place. Same math as
`MoEForCausalLM.forward` on each slot's whole sequence (to float rounding, ~1e-7 in fp32) with the same routing.
"""

from __future__ import annotations

import torch
from moe_models import MoEForCausalLM

from engine_adapters.native.decode.cached_plan import build_plan
from engine_adapters.native.decode.kv_cache import KVCache
from engine_adapters.native.decode.slot_context import RoutedExperts, SlotCacheContext


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
        cache.keys[0].shape[1:] != (cfg.cache_heads, cache.max_len, cfg.key_dim)
        or cache.values[0].shape[-1] != cfg.value_dim
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


def cached_forward(
    model: MoEForCausalLM,
    input_ids: torch.Tensor,
    slot_ids: torch.Tensor,
    slots: list[int],
    query_lens: list[int],
    cache: KVCache,
    experts: list[RoutedExperts | None] | None,
    capture_routing: bool,
    invariant: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Appends each chunk to its slot at positions cache.lengths[slot] .. +len-1 and advances the lengths.

    input_ids: [N] int64, the chunks concatenated; slot_ids: [S] distinct slots (`slots`, validated by
    `check_call_shape`); query_lens: [S], sum N. experts: per layer, a replacement for the MoE block's experts
    (or None for all); invariant: batch-invariant ops (true on-policy mode). Returns (logits of each chunk's last
    token [S, V] float32, expert ids of every input token [N, L_moe, K] int64 or None). Raises ValueError,
    changing nothing, if a chunk would overflow max_len.
    """
    start_lengths = check_lengths(slot_ids, slots, query_lens, cache)
    cfg = model.config
    windows = {cfg.sliding_window} if "sliding_attention" in cfg.layer_types else set()
    plan = build_plan(
        slot_ids.to(cache.device), query_lens, start_lengths, cfg.num_attention_heads // cfg.cache_heads, windows
    )
    ctx = SlotCacheContext(plan, cache, experts, invariant=invariant)
    h, routed = model.decode(input_ids, ctx)  # [N, hidden]
    logits = model.logits(h.index_select(0, plan.last_token_index), ctx).float()  # [S, V]
    cache.lengths.index_copy_(0, slot_ids.to(cache.device), plan.new_lengths)
    if not capture_routing:
        return logits, None
    return logits, model.stack_routing(routed, input_ids.numel())
