"""Sample-level group advantages of FlowGRPO, and the optional zero-advantage filter.

Rewards are one per sample. The reference repeats each reward over the T trained steps before taking an unbiased
std over the `[N, T]` tensor; repetition leaves the population variance unchanged and only moves Bessel's factor
(`sqrt(T(n-1)/(nT-1))`), so here the std is taken on the N sample rewards with an explicit `ddof`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from trainers.flow.config import FlowGRPOConfig


@dataclass(frozen=True)
class FlowAdvantages:
    """`values` `[N]` float32 (clamped); `singleton_groups`: groups of one sample (their advantage is 0)."""

    values: np.ndarray
    singleton_groups: int


def _std(x: np.ndarray, ddof: int) -> float:
    return float(np.std(x, ddof=ddof)) if len(x) > ddof else 0.0


def flow_advantages(rewards: np.ndarray, groups: np.ndarray, cfg: FlowGRPOConfig) -> FlowAdvantages:
    """`rewards` `[N]`, `groups` `[N]` ints (samples of one prompt share one). A singleton group's mean is its own
    reward, so its advantage is exactly 0 (LLM GRPO gives a singleton its raw score instead); a warning says so."""
    rewards = np.asarray(rewards, dtype=np.float64)
    groups = np.asarray(groups)
    if rewards.shape != groups.shape or rewards.ndim != 1:
        raise ValueError(
            f"flow_advantages: expected rewards and groups of one shape [N], got {rewards.shape} and {groups.shape}"
        )
    if not np.all(np.isfinite(rewards)):
        raise ValueError("flow_advantages: expected finite rewards, got NaN or inf")
    out = np.zeros_like(rewards)
    global_std = _std(rewards, cfg.ddof)
    singletons = 0
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        if len(rows) == 1:
            singletons += 1
            continue
        centred = rewards[rows] - rewards[rows].mean()
        if cfg.normalize_by_std:
            std = global_std if cfg.std_mode == "global" else _std(rewards[rows], cfg.ddof)
            centred = centred / (std + cfg.std_eps)
        out[rows] = centred
    if singletons:
        warnings.warn(
            f"flow_advantages: {singletons} group(s) of one sample get advantage 0 (nothing to compare "
            "with); use samples_per_prompt >= 2",
            stacklevel=2,
        )
    clipped = np.clip(out, -cfg.adv_clip_max, cfg.adv_clip_max)
    return FlowAdvantages(clipped.astype(np.float32), singletons)


def keep_for_training(advantages: np.ndarray, divisor: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted row indices to train on: every sample with a non-zero advantage, plus random zero-advantage ones
    until the count is a multiple of `divisor` (the mini-batches per step) or none is left; empty when every
    advantage is 0 (nothing to learn: the caller skips the update)."""
    if divisor < 1:
        raise ValueError(f"keep_for_training: expected divisor >= 1, got {divisor}")
    nonzero = np.flatnonzero(advantages != 0)
    zero = np.flatnonzero(advantages == 0)
    missing = (-len(nonzero)) % divisor
    if len(nonzero) == 0:
        return nonzero
    extra = rng.choice(zero, size=min(missing, len(zero)), replace=False) if missing and len(zero) else []
    return np.sort(np.concatenate([nonzero, np.asarray(extra, dtype=np.int64)]))
