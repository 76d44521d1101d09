"""The Engine seam: what the resume loop, the agent loop and every rollouter need from an inference engine."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from routing_state import RoutingSpec

from rollout_core.params import SamplingParams
from rollout_core.segment import Segment


@runtime_checkable
class Engine(Protocol):
    """An inference engine (native, vLLM, SGLang) behind one small async interface.

    Contract (checked by `rollout_core.testing.engine_contract`):
    - `generate` returns at most `params.max_new_tokens` tokens, one log-prob per token under
      `softmax(logits / temperature)`, and routing rows by the N-1 convention from `params.routed_experts_start`;
      an empty prompt or a token id outside the vocabulary raises ValueError;
    - `abort(request_id)` makes the in-flight call return `stop_reason=abort` with the tokens so far; an
      unknown id is a no-op (returns False);
    - `weight_version` is the version the engine serves now; `routing_spec` is None for a dense model.
    """

    @property
    def weight_version(self) -> int: ...

    @property
    def routing_spec(self) -> RoutingSpec | None: ...

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Segment: ...

    async def abort(self, request_id: str) -> bool: ...
