"""train_step: one update of any algorithm on any training backend. It owns, once: old and reference log-probs,
advantages, rollout correction, the step's plan of mini- and micro-batches, the train-vs-rollout mismatch metrics
and the step's metrics; the epochs x mini-batches x micro-batches loop and its loss and grad-norm checks are
`trainers.update_loop.run_update`'s (shared with the flow step), run with the algorithm's loss.

    old  <- backend.log_probs(batch)            if the algorithm recomputes the old policy
    ref  <- backend.log_probs(batch, reference) if the algorithm has a KL term (a teacher's: batch.teacher_log_probs)
    adv  <- algorithm.advantages(batch, old, ref)             [B, T-1], on the host
    w, mask <- rollout_correction(pi_train, mu)               if the algorithm has a correction
    run_update: for epoch, mini-batch:                        one optimiser step each
        for micro-batch: backend.forward_backward(micro, algorithm.loss)
    mismatch: rollout log-probs vs the trainer's pre-update replayed forward (and a sample without replay, which
              costs one forward of the sample; its replayed side comes from the update's own first forward)

Every `mismatch/*` metric covers only tokens sampled by the weights the trainer holds (`/tokens` counts them): in
synchronous training all of them, in asynchronous training the fresh ones.

Non-finite values stop the run at once, before they reach the weights where that is possible (`NonFiniteError`,
naming the step and the metric; the step is `backend.version + 1`, the run's step in both apps):
- advantages: checked before the first optimiser step (after the no-grad scoring they may need): none is taken;
- a mini-batch's loss (`actor/loss`) and the gradient norm (`actor/grad_norm`): in `run_update`, before and
  after each optimiser step (the loss's check means that step is never taken);
- any other metric that is NaN (but `mismatch/*`): raised at the step's end (`StepMetrics.result`).
No step is skipped silently; the remedy is `--resume` from the last complete checkpoint (taken before the error).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from trainers.aggregation import count_tokens
from trainers.algorithm.loss_io import LossInputs, LossOutputs
from trainers.algorithm.protocol import Algorithm
from trainers.backend.data_parallel import DataParallel
from trainers.backend.micro_batches import select_rows, split_by_token_budget
from trainers.backend.mismatch import log_prob_mismatch
from trainers.backend.protocol import PolicyRole, TrainingBackend
from trainers.batch import TrainBatch
from trainers.padding import PaddingNotInertError
from trainers.rollout_correction import rollout_correction
from trainers.stale_tokens import beyond_bound_mask, correct_beyond_bound
from trainers.step_metrics import NonFiniteError, StepMetrics
from trainers.step_plan import MiniBatchPlan, StepPlan
from trainers.train_config import TrainLoopConfig
from trainers.update_loop import Backward, Position, run_update

_Micro = tuple[list[int] | None, float]  # a micro-batch's rows (None: inert) and its loss tokens


@dataclass(frozen=True)
class StepResult:
    """`metrics`: flat floats; `advantages`: one per sample of the batch (row order), 0 on pads."""

    metrics: dict[str, float]
    advantages: list[float]


@dataclass(frozen=True)
class _Tensors:
    """What every micro-batch's loss reads, `[B, T-1]` on the backend's device."""

    old: torch.Tensor
    rollout: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    ref: torch.Tensor | None
    is_weights: torch.Tensor | None
    beyond: _BeyondBound | None = None


@dataclass(frozen=True)
class _BeyondBound:
    """Tokens beyond the staleness bound (`trainers.stale_tokens`): `mask [B, T-1]` marks them, `prox` holds the
    proximal log-probs (None: the update is one optimiser step, so each micro-batch's own pre-update forward is
    the proximal policy and costs no extra forward), `count` their number in the whole batch."""

    mask: torch.Tensor
    prox: torch.Tensor | None
    is_cap: float
    count: float


def score(
    backend: TrainingBackend, batch: TrainBatch, budget: int, *, replay: bool, role: PolicyRole = "policy"
) -> torch.Tensor:
    """`[B, T-1]` no-grad log-probs of the whole batch, in micro-batches of at most `budget` padded tokens."""
    out = torch.zeros(batch.rollout_log_probs.shape, dtype=torch.float32, device=backend.device)
    sharing = (batch.group_ids, batch.prompt_lengths.tolist()) if backend.shares_prompts else (None, None)
    groups = split_by_token_budget(batch.seq_lengths.tolist(), range(batch.batch_size), budget, *sharing)
    scored = backend.log_probs([select_rows(batch, r) for r in groups], replay=replay, role=role)
    for rows, lp in zip(groups, scored, strict=True):
        out[rows, : lp.shape[1]] = lp
    return out


def same_version_mask(batch: TrainBatch, version: int) -> torch.Tensor:  # [B, T-1]
    """Loss tokens sampled by exactly the weights `version`: the only ones whose rollout log-prob the trainer's
    forward should reproduce (older tokens differ by the policy's own change, not by mismatch)."""
    return batch.response_mask * (batch.token_versions == version).to(batch.response_mask.dtype)


def _sample_rows(batch: TrainBatch, cfg: TrainLoopConfig, seed: int, version: int) -> list[int]:
    """Up to `mismatch_sample_seqs` real sequences holding tokens of the version the trainer holds, a seeded choice
    per version (empty: no sample, no extra forward)."""
    fresh = same_version_mask(batch, version).sum(dim=1) > 0  # host tensors: no device wait
    real = torch.nonzero(fresh & ~batch.is_padding).flatten().tolist()
    if cfg.mismatch_sample_seqs == 0 or not real or batch.replay_ids is None:
        return []
    rng = np.random.default_rng([seed, version])
    return sorted(rng.choice(real, size=min(cfg.mismatch_sample_seqs, len(real)), replace=False).tolist())


def _no_replay_sample(
    backend: TrainingBackend, batch: TrainBatch, rows: list[int], budget: int, version: int
) -> tuple[dict[str, torch.Tensor], TrainBatch | None]:
    """Mismatch without replay on the sample `rows` (scored before the update): its metrics and the sample."""
    if not rows:
        return {}, None
    sub = select_rows(batch, rows).to(backend.device)
    same = same_version_mask(sub, version)
    lp = score(backend, sub, budget, replay=False)
    return log_prob_mismatch(lp, sub.rollout_log_probs, same, "mismatch/no_replay"), sub


def _sample_replay(sub: TrainBatch, rows: list[int], replayed: torch.Tensor, version: int) -> dict[str, torch.Tensor]:
    """The same sample's mismatch with replay, for a like-for-like comparison (mismatch/replay covers the whole
    batch), from the pre-update replayed log-probs of the whole batch `replayed` `[B, T-1]`."""
    lp = replayed[rows, : sub.rollout_log_probs.shape[1]]
    return log_prob_mismatch(lp, sub.rollout_log_probs, same_version_mask(sub, version), "mismatch/sample_replay")


def _top_k(batch: TrainBatch, rows: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The teacher's top-k log-probs and validity `[b, width, K]` of `rows`, when the batch has them."""
    lp, valid = batch.teacher_top_log_probs, batch.teacher_top_valid
    return None if lp is None or valid is None else (lp[rows, :width], valid[rows, :width])


def _inert(log_probs: torch.Tensor, top_k: torch.Tensor | None = None) -> LossOutputs:
    """A zero loss: the forward joins the other ranks' collectives and adds nothing to any gradient."""
    return LossOutputs(log_probs.sum() * 0.0)


def _backward(
    backend: TrainingBackend,
    algorithm: Algorithm,
    batch: TrainBatch,
    plan: StepPlan,
    t: _Tensors,
    replay: bool,
    capture: torch.Tensor | None,
) -> Callable[[Position, _Micro], list[Backward]]:
    """One micro-batch's forward and backward with the algorithm's loss (an inert one for a `None` micro-batch);
    fills `capture` with the first mini-batch's pre-update log-probs of the first epoch when given."""

    def run(position: Position, micro: _Micro) -> list[Backward]:
        mini = plan.mini_batches[position.mini_batch]
        rows, tokens = micro
        if rows is None:
            backend.forward_backward(select_rows(batch, [mini.local[0]]), _inert, replay=replay)
            return []
        sub = select_rows(batch, rows)
        width = sub.input_ids.shape[1] - 1
        fill = capture if position.epoch == 0 and position.mini_batch == 0 else None

        def loss_fn(lp: torch.Tensor, top: torch.Tensor | None) -> LossOutputs:
            if fill is not None:
                fill[rows, :width] = lp.detach()
            return _loss(algorithm, batch, mini, t, rows, width, lp, top)

        return [Backward(backend.forward_backward(sub, loss_fn, replay=replay), tokens)]

    return run


def _loss(
    algorithm: Algorithm,
    batch: TrainBatch,
    mini: MiniBatchPlan,
    t: _Tensors,
    rows: list[int],
    width: int,
    lp: torch.Tensor,
    top: torch.Tensor | None,
) -> LossOutputs:
    """The algorithm's loss on `rows` (`lp` `[b, width]` their log-probs, with gradient), with the stale-token
    correction of the tokens beyond the bound."""
    old, rollout = t.old[rows, :width], t.rollout[rows, :width]
    is_weights = None if t.is_weights is None else t.is_weights[rows, :width]
    b = t.beyond
    if b is not None:
        beyond = b.mask[rows, :width]
        prox = lp.detach() if b.prox is None else b.prox[rows, :width]
        old, is_weights = correct_beyond_bound(old, rollout, prox, beyond, is_weights, b.is_cap)
    out = algorithm.loss(
        LossInputs(
            log_probs=lp,
            old_log_probs=old,
            rollout_log_probs=rollout,
            advantages=t.advantages[rows, :width],
            mask=t.mask[rows, :width],
            num_tokens=mini.num_tokens,
            num_seqs=mini.num_seqs,
            ref_log_probs=None if t.ref is None else t.ref[rows, :width],
            is_weights=is_weights,
            top_k_log_probs=top,
            teacher_top_k=_top_k(batch, rows, width),
        )
    )
    if b is not None and b.prox is None and is_weights is not None:  # one optimiser step: exact mean
        out.sums["staleness/beyond_bound_is_mean"] = (is_weights * beyond).sum().double() / b.count
    return out


def _micro_batches(plan: StepPlan) -> list[list[_Micro]]:
    """Each mini-batch's micro-batches with their loss tokens; none for a mini-batch without loss tokens on any
    rank (the loop skips it)."""
    return [
        [] if mini.num_tokens == 0 else list(zip(mini.micro, mini.micro_tokens, strict=True))
        for mini in plan.mini_batches
    ]


def _check_advantages(batch: TrainBatch, tokens: torch.Tensor, per_sample: Sequence[float], step: int) -> None:
    rows = ~torch.isfinite(tokens.detach().cpu()).all(dim=-1)
    bad = [
        batch.uids[i]
        for i, (r, a) in enumerate(zip(rows.tolist(), per_sample, strict=True))
        if r or not math.isfinite(a)
    ]
    if bad:
        raise NonFiniteError(
            f"step {step}: advantages are not finite for {len(bad)} samples ({bad[:5]}), expected finite advantages "
            "(a reward, value or reference log-prob diverged). No optimiser step was taken: the weights are untouched",
            metric="advantages",
            step=step,
        )


def _check_pads(batch: TrainBatch, advantages: Sequence[float]) -> None:
    pads = batch.is_padding.tolist()
    bad = [batch.uids[i] for i, pad in enumerate(pads) if pad and advantages[i] != 0.0]
    if bad:
        raise PaddingNotInertError(f"train_step: expected advantage 0 on every pad, got non-zero on {bad[:5]}")


def _corrects_behaviour(algorithm: Algorithm) -> bool:
    """Whether the algorithm's loss already weights every token by its behaviour ratio against the recomputed old
    policy (decoupled PPO; a token- or sequence-level rollout correction): then a stale token needs nothing more."""
    c = algorithm.correction
    return algorithm.name == "decoupled" or (c is not None and c.is_level is not None)


def _beyond_bound(
    backend: TrainingBackend,
    algorithm: Algorithm,
    dev: TrainBatch,
    mask: torch.Tensor,
    old: torch.Tensor | None,
    cfg: TrainLoopConfig,
    mini_batches: int,
    metrics: StepMetrics,
) -> _BeyondBound | None:
    """The tokens beyond the batch's staleness bound, when it has one and any (else None: the step is unchanged).
    Their proximal log-probs are the recomputed old policy, or one extra no-grad forward when the update takes
    several optimiser steps (epochs x mini-batches) in bypass mode."""
    bound = dev.stale_bound
    if bound is None:
        return None
    beyond = beyond_bound_mask(dev.token_versions, mask, bound)
    count = float(beyond.sum())  # once per step: a host synchronisation
    metrics.add({"staleness/beyond_bound_token_frac": count / max(float(mask.sum()), 1.0)})
    if count == 0 or _corrects_behaviour(algorithm):
        return None
    single = cfg.ppo_epochs * mini_batches == 1
    prox = old if old is not None or single else score(backend, dev, cfg.micro_batch_tokens, replay=cfg.router_replay)
    if prox is not None:  # fixed weights: their mean is known before the update
        _, w = correct_beyond_bound(dev.rollout_log_probs, dev.rollout_log_probs, prox, beyond, None, bound.is_cap)
        metrics.add({"staleness/beyond_bound_is_mean": (w * beyond).sum().double() / count})
    return _BeyondBound(beyond, prox, bound.is_cap, count)


def _reference(
    backend: TrainingBackend, algorithm: Algorithm, dev: TrainBatch, budget: int, replay: bool
) -> torch.Tensor | None:
    """`[B, T-1]` the log-probs the algorithm compares with: the teacher's (scored at rollout time), the reference
    policy's (scored here), or None."""
    if algorithm.uses_teacher:
        if algorithm.needs_reference:
            raise ValueError(f"{algorithm.name}: expected a teacher or a reference policy, got both")
        if dev.teacher_log_probs is None:
            raise ValueError(f"{algorithm.name}: expected a batch with teacher log-probs, got none")
        return dev.teacher_log_probs
    return score(backend, dev, budget, replay=replay, role="reference") if algorithm.needs_reference else None


def train_step(
    backend: TrainingBackend, algorithm: Algorithm, batch: TrainBatch, cfg: TrainLoopConfig, *, seed: int = 0
) -> StepResult:
    """One update of `algorithm` on `batch` (on the host; every rank passes the same batch). Increments the
    backend's version by one. `seed` seeds the choice of the no-replay mismatch sample."""
    version, replay, budget = backend.version, cfg.router_replay, cfg.micro_batch_tokens
    dev = batch.to(backend.device)
    old = score(backend, dev, budget, replay=replay) if algorithm.recompute_old_log_probs else None
    ref = _reference(backend, algorithm, dev, budget, replay)
    adv = algorithm.advantages(batch, old, ref)
    per_sample = adv.per_sample.tolist()
    _check_advantages(batch, adv.tokens, per_sample, version + 1)
    _check_pads(batch, per_sample)
    metrics = StepMetrics()
    metrics.add(adv.metrics)
    mask, is_weights, host_mask = dev.response_mask, None, batch.response_mask
    if algorithm.correction is not None:
        pi_train = old if old is not None else score(backend, dev, budget, replay=replay)
        is_weights, mask, corr = rollout_correction(pi_train, dev.rollout_log_probs, mask, algorithm.correction)
        metrics.add(corr)
        host_mask = mask.cpu()
    sample_rows = _sample_rows(batch, cfg, seed, version)
    no_replay, sample = _no_replay_sample(backend, batch, sample_rows, budget, version)
    metrics.add(no_replay)
    plan = StepPlan.build(
        batch,
        host_mask,
        mini_batches=cfg.mini_batches_per_step,
        micro_batch_tokens=budget,
        dp=backend.data_parallel,
        shares_prompts=backend.shares_prompts,
    )
    # the sample's replayed pre-update log-probs: the recomputed old ones or the one mini-batch's own training forward
    # (no extra forward) when those replay, else a forward of their own now
    replayed = old if replay else None
    own_forward = not replay or len(plan.mini_batches) > 1 or backend.data_parallel is not None
    if sample is not None and replayed is None and own_forward:
        replayed = torch.zeros_like(dev.rollout_log_probs)
        replayed[sample_rows, : sample.rollout_log_probs.shape[1]] = score(backend, sample, budget, replay=True)
    beyond = _beyond_bound(backend, algorithm, dev, mask, old, cfg, len(plan.mini_batches), metrics)
    t = _Tensors(
        dev.rollout_log_probs if old is None else old,
        dev.rollout_log_probs,
        adv.tokens.to(backend.device),
        mask,
        ref,
        is_weights,
        beyond,
    )
    first = torch.zeros_like(dev.response_mask) if old is None else None
    backward = _backward(backend, algorithm, dev, plan, t, replay, first)
    run_update(
        backend, _micro_batches(plan), cfg.ppo_epochs, backward, metrics, step=version + 1, dp=backend.data_parallel
    )
    metrics.add(_replay_mismatch(dev, version, old, first, plan.mini_batches[0], replay, backend.data_parallel))
    if sample is not None:
        metrics.add(_sample_replay(sample, sample_rows, replayed if replayed is not None else first, version))
    backend.advance_version()
    if backend.data_parallel is not None:
        metrics.reduce_over(backend.data_parallel)  # each rank holds its rows' share of every loss metric
    metrics.add({"actor/lr": backend.learning_rate, "actor/loss_tokens": count_tokens(batch.response_mask)})
    return StepResult(metrics.result(step=version + 1), per_sample)


def _replay_mismatch(
    batch: TrainBatch,
    version: int,
    old: torch.Tensor | None,
    first: torch.Tensor | None,
    mini: MiniBatchPlan,
    replay: bool,
    dp: DataParallel | None,
) -> dict[str, torch.Tensor]:
    """The rollout log-probs vs the trainer's pre-update forward: the recomputed old log-probs, else the first
    mini-batch's own training forward (the whole batch when there is one mini-batch; under data parallelism each
    rank filled its rows, and one all-reduce gives every rank all of them)."""
    prefix = "mismatch/replay" if replay else "mismatch/train"
    same = same_version_mask(batch, version)
    if old is not None:
        return log_prob_mismatch(old, batch.rollout_log_probs, same, prefix)
    assert first is not None  # filled by the first mini-batch's forwards
    if dp is not None:
        first = dp.sum(first).to(first.dtype)  # rows are disjoint across ranks; the others are zeros
    rows = mini.rows if dp is not None else mini.local
    return log_prob_mismatch(first[rows], batch.rollout_log_probs[rows], same[rows], prefix)
