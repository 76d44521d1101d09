"""Tokens beyond the staleness bound, trained with a per-token behaviour correction instead of being dropped.

An asynchronous trainer at policy version `v` with staleness bound `S` calls a token sampled by version `u` *beyond
the bound* when `u < v - S` (`StaleBound.floor = v - S`). Such a token is trained as decoupled PPO trains every
token: its trust region is anchored at the proximal policy `π_prox` (the trainer's weights before the update), and
its loss is weighted by the truncated behaviour ratio

    w_t = min(exp(clamp(log π_prox(y_t) - log μ(y_t), ±20)), is_cap)

where `μ` is the behaviour policy that sampled it (the rollout log-prob). Tokens within the bound keep the
algorithm's own loss unchanged (bypass PPO: ratio `π_θ/μ`), so a batch without a token beyond the bound trains
exactly as before. An algorithm whose loss already weights every token by `π_prox/μ` (decoupled PPO, or a token- or
sequence-level rollout correction against the recomputed old policy) needs nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from rollout_core import NOT_SAMPLED

__all__ = ["StaleBound", "beyond_bound_mask", "correct_beyond_bound"]

LOG_RATIO_CLAMP = 20.0


@dataclass(frozen=True)
class StaleBound:
    """`floor`: tokens sampled by a weight version below it are beyond the bound (trainer version - max staleness);
    `is_cap`: the truncation of their behaviour weight `π_prox/μ` (> 0)."""

    floor: int
    is_cap: float

    def __post_init__(self) -> None:
        if not self.is_cap > 0:
            raise ValueError(f"StaleBound.is_cap: expected > 0, got {self.is_cap}")


def beyond_bound_mask(token_versions: torch.Tensor, mask: torch.Tensor, bound: StaleBound) -> torch.Tensor:
    """`[B, T]` in `mask`'s dtype: 1 on loss tokens sampled by a version below `bound.floor` (never on tokens no
    policy sampled, whose version is `NOT_SAMPLED`)."""
    if token_versions.shape != mask.shape:
        raise ValueError(
            f"beyond_bound_mask: expected token_versions of mask's shape {tuple(mask.shape)}, got "
            f"{tuple(token_versions.shape)}"
        )
    sampled = token_versions != NOT_SAMPLED
    return (mask > 0).logical_and(sampled).logical_and(token_versions < bound.floor).to(mask.dtype)


def correct_beyond_bound(
    old_log_probs: torch.Tensor,  # [B, T] the algorithm's old policy (the rollout's in bypass mode)
    rollout_log_probs: torch.Tensor,  # [B, T] log μ
    proximal_log_probs: torch.Tensor,  # [B, T] log π_prox, the weights before the update (no grad)
    beyond: torch.Tensor,  # [B, T] 1 on tokens beyond the bound
    is_weights: torch.Tensor | None,  # [B, T] the algorithm's rollout-correction weights, or None
    is_cap: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(old', is_weights')`: on tokens beyond the bound the old policy becomes `π_prox` and the weight is
    multiplied by `min(π_prox/μ, is_cap)`; every other entry is returned unchanged (weights 1 where None)."""
    if not (old_log_probs.shape == rollout_log_probs.shape == proximal_log_probs.shape == beyond.shape):
        raise ValueError(
            "correct_beyond_bound: expected four tensors of one shape, got "
            f"{[tuple(t.shape) for t in (old_log_probs, rollout_log_probs, proximal_log_probs, beyond)]}"
        )
    prox = proximal_log_probs.detach()
    stale = beyond > 0
    log_w = (prox - rollout_log_probs.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    w = torch.where(stale, torch.exp(log_w).clamp(max=is_cap), torch.ones_like(log_w))
    old = torch.where(stale, prox, old_log_probs)
    return old, w if is_weights is None else is_weights * w
