"""flow_train_step: one FlowGRPO update on a `FlowBackend`, read top to bottom.

    A     <- flow_advantages(rewards, groups)                  [N] sample-level, clamped
    rows  <- all, or the non-zero-advantage ones (kept divisible by the mini-batches)
    old   <- the rollout's own log-probs                       [N, W], when the batch is fresh (or old_policy rollout)
             else the trainer's recompute before the update,   with behaviour weights min(p_old / p_rollout, cap)
    run_update: for epoch, mini-batch (rows in group order, split evenly): one optimiser step each
        for micro-batch, window step k: backend.forward_backward(micro, k, loss)
    mismatch: the trainer's pre-update log-probs vs the rollout's, when the rollout was sampled by the weights
              the trainer holds (0 up to float rounding: the recompute runs the sampler's exact inputs)

The loop and its checks are `trainers.update_loop.run_update`'s, shared with `trainers.step.train_step`: a
non-finite mini-batch loss raises `NonFiniteError` before its optimiser step, a non-finite grad norm right after.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from flow_models.sampler import FlowRollout

from trainers.algorithm.loss_io import LossOutputs
from trainers.flow.advantages import flow_advantages, keep_for_training
from trainers.flow.backend import FlowBackend
from trainers.flow.config import FlowGRPOConfig, FlowTrainConfig
from trainers.flow.loss import FlowLossInputs, flow_grpo_loss
from trainers.step_metrics import StepMetrics
from trainers.update_loop import Backward, Position, run_update


@dataclass(frozen=True)
class FlowStepResult:
    metrics: dict[str, float]
    advantages: np.ndarray  # [N], before the zero-advantage filter


def _mini_batches(rows: np.ndarray, groups: np.ndarray, count: int) -> list[np.ndarray]:
    ordered = rows[np.argsort(groups[rows], kind="stable")]
    return [part for part in np.array_split(ordered, count) if len(part)]


def _mismatch(backend: FlowBackend, rollout: FlowRollout) -> dict[str, float]:
    recomputed = backend.log_probs(rollout)
    diff = (recomputed - rollout.log_probs).abs()
    return {"mismatch/max_abs": float(diff.max()), "mismatch/mean_abs": float(diff.mean())}


@dataclass(frozen=True)
class _OldPolicy:
    """`log_probs` `[N, W]`: the ratio's denominator; `weights` `[N, W]` the behaviour weights (None: all 1)."""

    log_probs: torch.Tensor
    weights: torch.Tensor | None


def _old_policy(
    backend: FlowBackend, cfg: FlowGRPOConfig, rollout: FlowRollout, sampled_by: int, metrics: StepMetrics
) -> _OldPolicy:
    """The rollout's log-probs for a fresh batch (the recompute equals them) or with `old_policy rollout`; else
    the trainer's recompute under its weights before the update, with truncated behaviour weights."""
    if sampled_by == backend.version or cfg.old_policy == "rollout":
        return _OldPolicy(rollout.log_probs, None)
    recomputed = backend.log_probs(rollout)
    raw = torch.exp(recomputed - rollout.log_probs)
    weights = torch.clamp(raw, max=cfg.behaviour_weight_cap)
    metrics.add(
        {
            "actor/behaviour_weight": float(weights.mean()),
            "actor/behaviour_weight_capped": float((raw > cfg.behaviour_weight_cap).float().mean()),
        }
    )
    return _OldPolicy(recomputed, weights)


def _micro_batches(parts: list[np.ndarray], micro_size: int) -> list[list[np.ndarray]]:
    """Each mini-batch's rows in micro-batches of at most `micro_size` samples, in order."""
    return [[part[start : start + micro_size] for start in range(0, len(part), micro_size)] for part in parts]


def _backward(
    backend: FlowBackend,
    rollout: FlowRollout,
    adv: torch.Tensor,
    old: _OldPolicy,
    parts: list[np.ndarray],
    cfg: FlowGRPOConfig,
    clip_eps: float,
) -> Callable[[Position, np.ndarray], list[Backward]]:
    """One micro-batch's forward and backward at every window step, with the FlowGRPO loss over its mini-batch's
    sample count; each pass weighs its samples."""

    def loss_fn(inputs: FlowLossInputs) -> LossOutputs:
        return flow_grpo_loss(inputs, clip_eps, cfg.beta)

    def run(position: Position, sub: np.ndarray) -> list[Backward]:
        num_samples = float(len(parts[position.mini_batch]))
        micro = rollout.select(sub.tolist())
        index = torch.as_tensor(sub, dtype=torch.long)
        passes: list[Backward] = []
        for k in range(len(rollout.window)):
            weights = None if old.weights is None else old.weights[index, k]
            out = backend.forward_backward(micro, k, old.log_probs[index, k], adv[index], num_samples, loss_fn, weights)
            passes.append(Backward(out, float(len(sub))))
        return passes

    return run


def flow_train_step(
    backend: FlowBackend,
    cfg: FlowGRPOConfig,
    loop: FlowTrainConfig,
    rollout: FlowRollout,
    rewards: np.ndarray,
    groups: np.ndarray,
    *,
    sampled_by: int,
    seed: int,
) -> FlowStepResult:
    """`sampled_by`: the weight version that sampled `rollout` (the mismatch is measured when it is the
    backend's). Advances the backend's version by one."""
    step = backend.version + 1
    result = flow_advantages(rewards, groups, cfg)
    metrics = StepMetrics()
    if sampled_by == backend.version:
        metrics.add(_mismatch(backend, rollout))
    rng = np.random.default_rng([seed, step])
    rows = np.arange(len(rollout))
    if cfg.drop_zero_advantage:
        rows = keep_for_training(result.values, loop.mini_batches_per_step, rng)
    adv = torch.from_numpy(result.values)
    clip_eps = cfg.clip_range(str(backend.sampler.reduction))
    if len(rows):
        old = _old_policy(backend, cfg, rollout, sampled_by, metrics)
        parts = _mini_batches(rows, np.asarray(groups), loop.mini_batches_per_step)
        backward = _backward(backend, rollout, adv, old, parts, cfg, clip_eps)
        run_update(backend, _micro_batches(parts, loop.micro_batch_size), loop.epochs, backward, metrics, step=step)
    else:
        metrics.add_count("actor/skipped_all_zero_advantage")
    metrics.add(
        {
            "adv/mean": float(result.values.mean()),
            "adv/std": float(result.values.std()),
            "adv/zero_frac": float(np.mean(result.values == 0)),
            "adv/singleton_groups": float(result.singleton_groups),
            "actor/trained_samples": float(len(rows)),
            "actor/lr": backend.learning_rate,
        }
    )
    backend.advance_version()
    return FlowStepResult(metrics.result(step=step), result.values)
