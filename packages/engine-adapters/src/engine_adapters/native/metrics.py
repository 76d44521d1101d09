"""EngineMetrics: a typed snapshot of the engine's counters, and the recorder that accumulates them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineMetrics:
    """Counters since the engine was built.

    `tokens_per_s` is generated tokens per second of step time (time spent in model steps, the engine's busy
    time), `mean_batch_occupancy` the mean over steps of rows stepped / `max_slots`. `preemptions` counts requests
    that lost their slot before ending; every request reserves a whole slot when admitted, so this engine never
    preempts and the count stays 0 (it is reported so dashboards can compare engines).
    """

    steps: int
    generated_tokens: int
    prefill_tokens: int
    busy_seconds: float
    tokens_per_s: float
    mean_batch_occupancy: float
    running: int  # requests stepped now
    frozen: int  # requests held by pause("keep")
    queue_depth: int  # waiting requests
    preemptions: int
    weight_version: int
    paused: bool


class MetricsRecorder:
    """Accumulates per-step counters on the event loop."""

    def __init__(self, max_slots: int) -> None:
        self.max_slots = max_slots
        self.reset()

    def reset(self) -> None:
        self.steps = 0
        self.generated_tokens = 0
        self.prefill_tokens = 0
        self.busy_seconds = 0.0
        self._occupancy_sum = 0.0

    def record_step(self, rows: int, prefill_tokens: int, seconds: float) -> None:
        """One step that sampled `rows` tokens (one per running request) and prefilled `prefill_tokens`."""
        self.steps += 1
        self.generated_tokens += rows
        self.prefill_tokens += prefill_tokens
        self.busy_seconds += seconds
        self._occupancy_sum += rows / self.max_slots

    def record_steps(self, steps: int, tokens: int, seconds: float) -> None:
        """A burst chunk: `steps` decode steps not counted before, taking `seconds`, and `tokens` tokens."""
        self.steps += steps
        self.generated_tokens += tokens
        self.busy_seconds += seconds
        self._occupancy_sum += tokens / self.max_slots

    def snapshot(self, *, running: int, frozen: int, waiting: int, version: int, paused: bool) -> EngineMetrics:
        return EngineMetrics(
            steps=self.steps,
            generated_tokens=self.generated_tokens,
            prefill_tokens=self.prefill_tokens,
            busy_seconds=self.busy_seconds,
            tokens_per_s=self.generated_tokens / self.busy_seconds if self.busy_seconds > 0 else 0.0,
            mean_batch_occupancy=self._occupancy_sum / self.steps if self.steps else 0.0,
            running=running,
            frozen=frozen,
            queue_depth=waiting,
            preemptions=0,  # slots are reserved for a request's whole life: nothing is ever preempted
            weight_version=version,
            paused=paused,
        )
