"""The driver's wall clock per step: time from one step's end to the next (start-up excluded after step 1, since
the clock starts when the first step is queued) and the throughput over it."""

from __future__ import annotations

import time


class StepClock:
    def __init__(self) -> None:
        self.last_step_end = time.perf_counter()

    def restart(self) -> None:
        """The next step's time counts from now (called once the first step is queued)."""
        self.last_step_end = time.perf_counter()

    def end_step(self, metrics: dict[str, float], sync_start: float) -> None:
        """Adds `timing/sync_s` (since `sync_start`, a `time.perf_counter()` reading after the update finished),
        `timing/step_s` and the samples and generated tokens per second over it to `metrics`, which must hold
        `rollout/num_samples` and `rollout/generated_tokens`."""
        now = time.perf_counter()
        metrics["timing/sync_s"] = now - sync_start
        metrics["timing/step_s"] = now - self.last_step_end
        self.last_step_end = now
        metrics["perf/samples_per_s"] = metrics["rollout/num_samples"] / metrics["timing/step_s"]
        metrics["perf/rollout_tokens_per_s"] = metrics["rollout/generated_tokens"] / metrics["timing/step_s"]
