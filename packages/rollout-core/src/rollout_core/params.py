"""Sampling parameters of one engine call."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    """What one `Engine.generate` call may produce.

    `temperature == 0` is greedy. `top_k == 0` and `top_p == 1.0` disable those filters. Log-probs returned by
    an engine are under the temperature-scaled distribution `softmax(logits / temperature)` (raw logits when
    greedy), which is what the trainer computes. A generated token listed in `stop_token_ids` ends the call
    and is included in the output, as does the model's end-of-sequence token unless `ignore_eos` (vLLM's and
    SGLang's key of that name: generation runs on past it, to `max_new_tokens` or a stop token).
    `routed_experts_start` asks the engine to return routing rows only for input positions
    `>= routed_experts_start` (vLLM's `routed_experts_prompt_start`).
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    return_routed_experts: bool = True
    routed_experts_start: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: expected an int >= 1, got {self.max_new_tokens!r}")
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature: expected >= 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p: expected in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k: expected an int >= 0 (0 = off), got {self.top_k!r}")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos: expected a bool, got {self.ignore_eos!r}")
        if self.routed_experts_start < 0:
            raise ValueError(f"routed_experts_start: expected >= 0, got {self.routed_experts_start}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    def replace(self, **changes: object) -> SamplingParams:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
