"""InvariantCachedModel: the engine's forward in true on-policy mode (`EngineConfig.true_on_policy`).

It has `CachedModel.forward`'s contract, but computes every position alone with `moe_models.invariant_step`
(one row through every op, attention over the sequence's own keys), so the logits, log-probs and routing it
produces are bitwise those of the trainer's `invariant_log_probs` over the same tokens. Each slot's keys and values
live in an `InvariantState` of their own (the slot KV cache only keeps the lengths, for bookkeeping); a slot whose
cache length is 0 starts a new sequence. Slow by design: no batching across rows, no fused kernels.
"""

from __future__ import annotations

import torch
from moe_models import MoEForCausalLM
from moe_models.invariant import InvariantState, invariant_step

from native_engine.decode.cached_forward import check_call_shape
from native_engine.decode.kv_cache import KVCache


class InvariantCachedModel:
    def __init__(self, model: MoEForCausalLM) -> None:
        if model.lm_head.weight.dtype != torch.float32:
            raise ValueError(f"true on-policy mode: expected fp32 weights, got {model.lm_head.weight.dtype}")
        self.model = model
        self._states: dict[int, InvariantState] = {}

    @property
    def compiled(self) -> bool:
        return False

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        slot_ids: torch.Tensor,
        query_lens: list[int],
        cache: KVCache,
        *,
        capture_routing: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As `CachedModel.forward`: (logits of each chunk's last token [S, V] float32, expert ids of every input
        token [N, L_moe, K] or None)."""
        check_call_shape(self.model, input_ids, slot_ids, query_lens, cache)
        for slot, n in zip(slot_ids.tolist(), query_lens, strict=True):
            if cache.length(slot) + n > cache.max_len:
                raise ValueError(
                    f"slot {slot}: {cache.length(slot)} + {n} positions, expected <= max_len {cache.max_len}"
                )
        last, rows = [], []
        offset = 0
        for slot, n in zip(slot_ids.tolist(), query_lens, strict=True):
            if cache.length(slot) == 0 or slot not in self._states:
                self._states[slot] = InvariantState()
            state = self._states[slot]
            for token in input_ids[offset : offset + n].tolist():
                logits, routed = invariant_step(self.model, int(token), state)
                rows.append(routed)
            last.append(logits)
            cache.lengths[slot] += n
            offset += n
        routing = torch.stack(rows) if capture_routing and rows and rows[0].numel() else None
        return torch.stack(last), routing
