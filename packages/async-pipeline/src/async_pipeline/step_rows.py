"""StepRows: one `metrics.jsonl` line per step, in step order, although a step's validation finishes later than
its update (the validator runs beside the trainer).

A step's training metrics wait here until its validation (when one was started for it) has arrived; then its line
is written with both, after every earlier step's line. Step 0 of a fresh run is the base model's validation
alone.
"""

from __future__ import annotations

from run_lifecycle import MetricsLog


class StepRows:
    def __init__(self, log: MetricsLog, next_step: int) -> None:
        self.log = log
        self.next_step = next_step  # the first step whose line is not written yet
        self._metrics: dict[int, dict[str, float]] = {}
        self._awaiting: set[int] = set()  # steps whose validation was started and has not arrived

    def expect_validation(self, step: int) -> None:
        self._awaiting.add(step)

    def add_training(self, step: int, metrics: dict[str, float]) -> None:
        self._merge(step, metrics)

    def add_validation(self, step: int, metrics: dict[str, float]) -> None:
        if step not in self._awaiting:
            raise ValueError(f"StepRows: got a validation of step {step}, expected one of {sorted(self._awaiting)}")
        self._awaiting.discard(step)
        self._merge(step, metrics)

    def _merge(self, step: int, metrics: dict[str, float]) -> None:
        if step < self.next_step:
            raise ValueError(f"StepRows: step {step} was written already (next is {self.next_step})")
        row = self._metrics.setdefault(step, {})
        overlap = sorted(set(row) & set(metrics))
        if overlap:
            raise ValueError(f"StepRows: step {step} got {overlap} twice")
        row.update(metrics)
        self._flush()

    def _flush(self) -> None:
        while self.next_step in self._metrics and self.next_step not in self._awaiting:
            self.log.log(self.next_step, self._metrics.pop(self.next_step))
            self.next_step += 1

    @property
    def unwritten(self) -> list[int]:
        """Steps held back (waiting for a validation or for an earlier step)."""
        return sorted(set(self._metrics) | self._awaiting)
