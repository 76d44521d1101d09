"""The validations a run has started but not yet collected: each runs on the validator actor's own engine while
the trainer goes on, and its metrics join its step's line when it is collected (`StepRows` holds the lines back
until then, so `metrics.jsonl` stays in step order)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import ray

from async_pipeline.step_rows import StepRows


class PendingValidations:
    def __init__(
        self, validator: Any, rows: StepRows, call_timeout_s: float, base_extra: Mapping[str, float] | None = None
    ) -> None:
        """`base_extra`: metrics added to step 0's validation (the base model's), e.g. the teacher's accuracy."""
        self.validator = validator
        self.rows = rows
        self.call_timeout_s = call_timeout_s
        self.base_extra = dict(base_extra or {})
        self.pending: dict[int, Any] = {}  # step -> the validator's call

    def start(self, step: int, weights: Any) -> None:
        """Starts the validation of `step` on `weights` (an ObjectRef of a WeightHandle; None: the base model)."""
        self.pending[step] = self.validator.validate.remote(weights, step)
        self.rows.expect_validation(step)

    async def collect(self, *, wait_up_to: int | None = None) -> dict[str, float]:
        """Adds every finished validation to its step's metrics line; waits for those of steps <= `wait_up_to`
        (None: for none). Returns the newest collected metrics (for the progress bar)."""
        newest: dict[str, float] = {}
        for step, ref in sorted(self.pending.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if not ready and (wait_up_to is None or step > wait_up_to):
                continue
            result: dict[str, float] = await asyncio.wait_for(ref, self.call_timeout_s)
            if step == 0:
                result = result | self.base_extra
            self.rows.add_validation(step, result)
            del self.pending[step]
            newest = result
        return newest
