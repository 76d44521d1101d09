"""Advantage estimators by name: outcome rewards (and optional per-token penalties) to `[B, T-1]` token advantages.

Outcome estimators (grpo, drgrpo, rloo) score each sequence by its reward (plus its summed per-token penalties,
when there are any) and broadcast the group-relative scalar to the sequence's loss tokens. Token estimators
(reinforce_pp, gae) read the per-token rewards: the outcome reward sits on the sequence's last loss token.
`reinforce_pp_baseline` subtracts the group mean score, then whitens over the batch's loss tokens. GAE runs
without a critic (values 0). Every estimator is 0 off the loss mask, so inert pads get exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trainers.advantages import (
    broadcast_to_tokens,
    gae,
    grpo_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)
from trainers.batch import TrainBatch

ESTIMATORS = ("grpo", "drgrpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae")


@dataclass(frozen=True)
class Advantages:
    """`tokens` `[B, T-1]`, 0 off the loss mask; `per_sample` `[B]`: the sequence's advantage (outcome estimators)
    or the mean over its loss tokens (token estimators; 0 without loss tokens), for dumps; `metrics`: 0-dim
    tensors (e.g. a KL reward penalty's)."""

    tokens: torch.Tensor
    per_sample: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


def _token_mean(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # [B, T], [B, T] -> [B]
    return (tokens * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def outcome_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # [B], [B, T] -> [B, T]
    """Each sequence's reward on its last loss token, 0 elsewhere (a sequence without loss tokens gets none)."""
    m = mask > 0
    last = torch.where(m, torch.arange(mask.shape[1]).expand_as(mask), -1).max(dim=1).values  # [B]
    out = torch.zeros(mask.shape, dtype=rewards.dtype)
    rows = torch.nonzero(last >= 0).flatten()
    out[rows, last[rows]] = rewards[rows]
    return out


def token_advantages(
    estimator: str,
    batch: TrainBatch,
    *,
    token_rewards: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> Advantages:
    """`token_rewards` `[B, T-1]` (e.g. with a KL penalty subtracted): None means each sequence's outcome reward on
    its last loss token; outcome estimators score a sequence by its summed token rewards. `batch` must be on the CPU
    (group statistics loop over groups on the host)."""
    mask = batch.response_mask
    scores = batch.rewards if token_rewards is None else (token_rewards * mask).sum(-1)
    if estimator in ("grpo", "drgrpo", "rloo"):
        if estimator == "rloo":
            adv = rloo_advantages(scores, batch.group_ids)
        else:
            adv = grpo_advantages(scores, batch.group_ids, norm_by_std=estimator == "grpo")
        return Advantages(broadcast_to_tokens(adv, mask), adv)
    if estimator == "reinforce_pp_baseline":
        tokens = reinforce_pp_baseline_advantages(scores, batch.group_ids, mask)
        return Advantages(tokens, _token_mean(tokens, mask))
    if token_rewards is None:
        token_rewards = outcome_token_rewards(batch.rewards, mask)
    if estimator == "reinforce_pp":
        tokens = reinforce_pp_advantages(token_rewards, mask, gamma)
    elif estimator == "gae":
        tokens, _ = gae(token_rewards, None, mask, gamma, lam)
    else:
        raise ValueError(f"advantage estimator: expected one of {list(ESTIMATORS)}, got {estimator!r}")
    return Advantages(tokens, _token_mean(tokens, mask))
