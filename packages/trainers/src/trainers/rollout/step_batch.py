"""From scored samples to the trainer's batch: drop what cannot be trained on, pad with inert samples, collate."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from trainers import TrainBatch, TrainSample, collate, pad_to_multiple
from trainers.rollout.samples import SampleStatus, ScoredSample


@dataclass
class StepBatch:
    """`samples` = the ok samples (in the order of `real`) followed by inert pads; `batch` collates them."""

    real: list[ScoredSample]
    samples: list[TrainSample]
    batch: TrainBatch

    @property
    def num_padding(self) -> int:
        return len(self.samples) - len(self.real)


def to_train_sample(s: ScoredSample) -> TrainSample:
    r = s.request
    sample = TrainSample.from_trajectory(
        s.trajectory,
        uid=r.request_id,
        group_id=r.group_id,
        reward=s.reward,
        acc=s.acc,
        data_source=r.example.data_source,
    )
    return sample if s.teacher is None else dataclasses.replace(sample, teacher=s.teacher)


def build_step_batch(scored: Sequence[ScoredSample], *, multiple: int, pad_token_id: int) -> StepBatch:
    """Only status-ok samples train; pads (their own group, reward 0) make the count a multiple of `multiple`.
    Raises if no sample is ok (there is nothing to learn from and every metric would be undefined)."""
    real = [s for s in scored if s.status is SampleStatus.OK]
    if not real:
        counts = {str(st): sum(s.status is st for s in scored) for st in SampleStatus}
        raise ValueError(f"build_step_batch: expected at least one ok sample, got none ({counts})")
    samples = pad_to_multiple([to_train_sample(s) for s in real], multiple, pad_token_id=pad_token_id)
    return StepBatch(real=real, samples=samples, batch=collate(samples, pad_token_id))
