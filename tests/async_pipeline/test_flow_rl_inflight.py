"""InFlight: each step is submitted once and only up to the run's last step; a checkpoint saves every batch in
flight and a resume trains exactly those."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from async_pipeline.flow_inflight import PENDING, InFlight
from trainers.flow.batch import RolloutBatch
from trainers.weight_sync import WeightHandle


def _batch(step: int) -> RolloutBatch:
    n, w = 4, 2
    return RolloutBatch(
        step=step,
        version=step - 1,
        window_start=1,
        labels=np.arange(n, dtype=np.int64),
        groups=np.repeat(np.arange(2, dtype=np.int64), 2),
        sigmas=np.linspace(1, 0, 6, dtype=np.float32),
        latents=np.full((n, w + 1, 1, 8, 8), step, dtype=np.float32),
        log_probs=np.zeros((n, w), dtype=np.float32),
        images=np.zeros((n, 1, 8, 8), dtype=np.float32),
        rewards=np.array([0.0, 1.0, 0.5, 0.25], dtype=np.float32),
        sample_s=0.5,
    )


class FakeRollouts:
    def __init__(self) -> None:
        self.submitted: list[int] = []

    def publish(self, weights: dict[str, object], version: int) -> WeightHandle:
        raise AssertionError("not used")

    def push(self, handle: WeightHandle) -> None:
        raise AssertionError("not used")

    def submit(self, step: int) -> None:
        self.submitted.append(step)

    def take(self, step: int) -> tuple[RolloutBatch, float]:
        assert step in self.submitted, f"take({step}) before submit"
        return _batch(step), 0.125

    def close(self) -> None:
        pass


def test_a_step_is_submitted_once_and_never_past_the_last_step():
    rollouts = FakeRollouts()
    inflight = InFlight(rollouts, last_step=3)  # type: ignore[arg-type]
    for step in (1, 2, 2, 3, 4, 5):
        inflight.submit(step)
    assert rollouts.submitted == [1, 2, 3]
    batch, wait = inflight.take(1)
    assert (batch.step, wait) == (1, 0.125)


def test_a_checkpoint_saves_every_batch_in_flight_and_a_resume_trains_them(tmp_path: Path):
    rollouts = FakeRollouts()
    inflight = InFlight(rollouts, last_step=5)  # type: ignore[arg-type]
    for step in (1, 2, 3):
        inflight.submit(step)
    inflight.take(1)
    inflight.save(tmp_path)
    assert sorted(p.name for p in (tmp_path / PENDING).iterdir()) == ["2.npz", "3.npz"]

    resumed_rollouts = FakeRollouts()
    resumed = InFlight(resumed_rollouts, last_step=2)  # type: ignore[arg-type]
    resumed.restore(tmp_path)
    resumed.submit(2)
    batch, wait = resumed.take(2)
    assert resumed_rollouts.submitted == [], "a restored batch is trained, not sampled again"
    assert wait == 0.0 and batch.step == 2 and batch.version == 1 and batch.sample_s == 0.5
    np.testing.assert_array_equal(batch.latents, _batch(2).latents)
    assert 3 not in resumed.ready, "batches past the run's last step are dropped"
