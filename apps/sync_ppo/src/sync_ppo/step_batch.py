"""From scored samples to the trainer's batch: drop what cannot be trained on, pad, compute advantages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from trainers import TrainBatch, TrainSample, assert_inert, collate, grpo_advantages, pad_to_multiple, rloo_advantages

from sync_ppo.rollout import SampleStatus, ScoredSample


@dataclass
class StepBatch:
    """`samples` = the ok samples (same order as `real`) followed by inert pads; `advantages` is `[B]`."""

    real: list[ScoredSample]
    samples: list[TrainSample]
    batch: TrainBatch
    advantages: torch.Tensor  # [B] float32, 0 on pads

    @property
    def num_padding(self) -> int:
        return len(self.samples) - len(self.real)


def advantages_of(kind: str, rewards: torch.Tensor, group_ids: Sequence[str]) -> torch.Tensor:  # [B] -> [B]
    if kind == "grpo":
        return grpo_advantages(rewards, group_ids)
    if kind == "drgrpo":
        return grpo_advantages(rewards, group_ids, norm_by_std=False)
    if kind == "rloo":
        return rloo_advantages(rewards, group_ids)
    raise ValueError(f"advantage: expected one of grpo, drgrpo, rloo, got {kind!r}")


def to_train_sample(s: ScoredSample) -> TrainSample:
    r = s.request
    return TrainSample.from_trajectory(
        s.trajectory, uid=r.request_id, group_id=r.group_id, reward=s.reward, acc=s.acc,
        data_source=r.example.data_source,
    )  # fmt: skip


def build_step_batch(scored: Sequence[ScoredSample], *, multiple: int, pad_token_id: int, advantage: str) -> StepBatch:
    """Only status-ok samples train; pads (their own group, reward 0) make the count a multiple of `multiple`.
    Raises if no sample is ok (there is nothing to learn from and every metric would be undefined)."""
    real = [s for s in scored if s.status is SampleStatus.OK]
    if not real:
        counts = {str(st): sum(s.status is st for s in scored) for st in SampleStatus}
        raise ValueError(f"build_step_batch: expected at least one ok sample, got none ({counts})")
    samples = pad_to_multiple([to_train_sample(s) for s in real], multiple, pad_token_id=pad_token_id)
    batch = collate(samples, pad_token_id)
    adv = advantages_of(advantage, batch.rewards, batch.group_ids)
    assert_inert(samples, adv)
    return StepBatch(real=real, samples=samples, batch=batch, advantages=adv)
