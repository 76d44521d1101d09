"""Tokens beyond the staleness bound (`TrainBatch.stale_bound`): never trained without their behaviour correction.

With every token beyond the bound, bypass PPO trains exactly as decoupled PPO with the same cap; within the bound
nothing changes (same gradient, bit for bit); mixed batches correct exactly the stale tokens; an algorithm that
already weights by pi_prox / mu is left alone; several optimiser steps anchor at the recomputed proximal policy."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from rollout_core import NOT_SAMPLED
from trainers import LossInputs, LossOutputs, StaleBound, TrainBatch, collate
from trainers.stale_tokens import beyond_bound_mask
from trainers_fixtures import PAD, algorithm, backend, grads, rollouts, step, tiny_model

torch.set_num_threads(1)
SHIFT = 0.5  # mu = pi_prox - SHIFT on every loss token: each behaviour ratio pi_prox / mu is exp(SHIFT), which
# bypass PPO clips (1.65 > 1 + 0.2): uncorrected, a stale token with a positive advantage would get no gradient


def _batch(versions: list[int], bound: StaleBound | None) -> TrainBatch:
    """Twelve rollouts of the tiny model; sample i's tokens have version `versions[i % len(versions)]`."""
    samples = rollouts(tiny_model())
    samples = [
        dataclasses.replace(s, token_versions=[versions[i % len(versions)]] * len(s.token_versions))
        for i, s in enumerate(samples)
    ]
    batch = collate(samples, PAD)
    shifted = batch.rollout_log_probs - SHIFT * batch.response_mask
    return dataclasses.replace(batch, rollout_log_probs=shifted, stale_bound=bound)


def _grads(batch: TrainBatch, kind: str = "ppo", **loop: object) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    model = tiny_model()
    fields = {"is_cap": loop.pop("is_cap")} if "is_cap" in loop else {}
    metrics = step(backend(model, grad_clip=1e9), batch, algorithm(kind, **fields), **loop).metrics
    return grads(model), metrics


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], **tol: float) -> None:
    assert a.keys() == b.keys() and len(a) > 0
    for name, value in a.items():
        torch.testing.assert_close(b[name], value, msg=name, **tol)


def test_a_batch_within_the_bound_trains_bit_for_bit_as_without_a_bound() -> None:
    plain, _ = _grads(_batch([0], None))
    bounded, metrics = _grads(_batch([0], StaleBound(floor=0, is_cap=2.0)))
    _assert_same(plain, bounded, atol=0.0, rtol=0.0)
    assert metrics["staleness/beyond_bound_token_frac"] == 0.0
    assert "staleness/beyond_bound_is_mean" not in metrics


@pytest.mark.parametrize("cap", [2.0, 1.05])
@pytest.mark.parametrize("mini_batches", [1, 2])
def test_tokens_all_beyond_the_bound_train_as_decoupled_ppo_with_the_same_cap(cap: float, mini_batches: int) -> None:
    """One mini-batch: the proximal policy is each micro-batch's own forward; two: one extra scoring forward."""
    bound = StaleBound(floor=1, is_cap=cap)
    corrected, metrics = _grads(_batch([0], bound), mini_batches_per_step=mini_batches)
    decoupled, _ = _grads(_batch([0], None), "decoupled", is_cap=cap, mini_batches_per_step=mini_batches)
    _assert_same(decoupled, corrected, atol=1e-6, rtol=1e-4)
    assert metrics["staleness/beyond_bound_token_frac"] == 1.0
    assert metrics["staleness/beyond_bound_is_mean"] == pytest.approx(min(math.exp(SHIFT), cap), rel=1e-4)
    bypass, _ = _grads(_batch([0], None), mini_batches_per_step=mini_batches)
    assert any(not torch.allclose(bypass[k], v, atol=1e-6, rtol=1e-4) for k, v in corrected.items())


class _Recording:
    """PPO whose loss records what each micro-batch was given."""

    def __init__(self) -> None:
        self.inner = algorithm("ppo")
        self.seen: list[LossInputs] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def loss(self, inputs: LossInputs) -> LossOutputs:
        self.seen.append(inputs)
        return self.inner.loss(inputs)


def test_in_a_mixed_batch_exactly_the_tokens_beyond_the_bound_get_the_proximal_anchor_and_weight() -> None:
    batch = _batch([3, 5], StaleBound(floor=4, is_cap=2.0))  # even samples version 3: beyond; odd ones 5: within
    alg = _Recording()
    step(backend(tiny_model()), batch, alg, micro_batch_tokens=10_000)  # type: ignore[arg-type]
    (x,) = alg.seen
    stale = (batch.token_versions == 3) & (batch.response_mask > 0)
    fresh = (batch.token_versions == 5) & (batch.response_mask > 0)
    assert stale.any() and fresh.any()
    assert x.is_weights is not None
    # the micro-batch's rows are in its own order: classify its loss tokens by what they were given
    m = x.mask > 0
    prox = x.log_probs.detach()  # one optimiser step: the pre-update forward is the proximal policy
    as_fresh = (x.old_log_probs == x.rollout_log_probs) & (x.is_weights == 1.0)
    want_w = torch.exp(prox - x.rollout_log_probs).clamp(max=2.0)
    as_stale = torch.isclose(x.old_log_probs, prox) & torch.isclose(x.is_weights, want_w, rtol=1e-5, atol=0.0)
    assert bool((as_fresh | as_stale)[m].all())
    assert int((as_stale & ~as_fresh)[m].sum()) == int(stale.sum())
    assert int((as_fresh & ~as_stale)[m].sum()) == int(fresh.sum())
    torch.testing.assert_close(x.is_weights[as_stale & m], want_w[as_stale & m])
    assert float(want_w[as_stale & m].min()) > 1.5  # exp(0.5): a weight the uncorrected loss would clip


def test_an_algorithm_that_weights_by_the_behaviour_ratio_already_is_left_unchanged() -> None:
    plain, _ = _grads(_batch([0], None), "decoupled")
    bounded, metrics = _grads(_batch([0], StaleBound(floor=1, is_cap=1.05)), "decoupled")
    _assert_same(plain, bounded, atol=0.0, rtol=0.0)
    assert metrics["staleness/beyond_bound_token_frac"] == 1.0


def test_the_bound_never_marks_tokens_no_policy_sampled_or_outside_the_loss() -> None:
    versions = torch.tensor([[NOT_SAMPLED, 0, 1, 2, 0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    beyond = beyond_bound_mask(versions, mask, StaleBound(floor=2, is_cap=2.0))
    assert beyond.tolist() == [[0.0, 1.0, 1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="expected > 0"):
        StaleBound(floor=0, is_cap=0.0)
