"""train_step: one loop for every algorithm. Mismatch metrics count only fresh tokens; the update does not depend on
the micro-batch split or on inert pads; mini-batches step once each; decoupled PPO weights by pi_prox / mu; GSPO,
KL (loss and reward), rollout correction, every estimator and seq-mean-token-sum-norm run through it."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trainers import ESTIMATORS, TrainBatch, collate, pad_to_multiple
from trainers.algorithm import CorrectionConfig, KLConfig
from trainers.backend import split_by_token_budget
from trainers_fixtures import PAD, algorithm, backend, grads, rollouts, step, tiny_model

torch.set_num_threads(1)


def _batch(num_prompts: int = 4, per_prompt: int = 2, pad_to: int = 1) -> TrainBatch:
    samples = pad_to_multiple(rollouts(tiny_model(), num_prompts, per_prompt), pad_to, pad_token_id=PAD)
    return collate(samples, PAD)


def test_train_step_reports_mismatch_with_and_without_replay_and_bumps_version() -> None:
    model = tiny_model()
    batch = collate(rollouts(model), PAD)
    b = backend(model)
    metrics = step(b, batch).metrics
    assert b.version == 1
    assert metrics["mismatch/replay/abs_diff_mean"] < 2e-6
    assert metrics["mismatch/replay/tokens"] == batch.num_loss_tokens
    assert metrics["mismatch/no_replay/tokens"] > 0
    assert metrics["mismatch/sample_replay/tokens"] == metrics["mismatch/no_replay/tokens"]
    assert metrics["mismatch/sample_replay/abs_diff_mean"] <= metrics["mismatch/no_replay/abs_diff_mean"] + 1e-7
    assert metrics["actor/optimizer_steps"] == 1.0
    assert all(isinstance(v, float) for v in metrics.values())


def _grads_of_step(budget: int, pad_to: int = 1) -> dict[str, torch.Tensor]:
    """The (clipped) gradient of one step; compared instead of weights because Adam's first step is ~lr·sign(g),
    which turns rounding noise in a near-zero gradient into an lr-sized weight difference."""
    batch = _batch(pad_to=pad_to)
    model = tiny_model()
    step(backend(model), batch, micro_batch_tokens=budget)
    return grads(model)


def test_micro_batch_token_budget_does_not_change_the_update() -> None:
    whole, split = _grads_of_step(budget=10_000), _grads_of_step(budget=12)
    assert whole.keys() == split.keys() and len(whole) > 0
    for name, value in whole.items():
        torch.testing.assert_close(split[name], value, atol=1e-6, rtol=1e-4, msg=name)


def test_inert_padding_samples_do_not_change_the_update_and_get_zero_advantage() -> None:
    plain = _grads_of_step(budget=10_000)
    padded = _grads_of_step(budget=10_000, pad_to=11)
    assert plain.keys() == padded.keys() and len(plain) > 0
    for name, value in plain.items():
        torch.testing.assert_close(padded[name], value, atol=1e-6, rtol=1e-4, msg=name)
    batch = _batch(pad_to=11)
    result = step(backend(tiny_model()), batch)
    assert [a for a, pad in zip(result.advantages, batch.is_padding.tolist(), strict=True) if pad] == [0.0] * 3


def test_mini_batches_take_one_optimizer_step_each() -> None:
    metrics = step(backend(tiny_model()), _batch(), mini_batches_per_step=4, ppo_epochs=2).metrics
    assert metrics["actor/optimizer_steps"] == 8.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.integers(1, 120))
def test_token_budget_split_covers_every_row_once_within_budget(lengths: list[int], budget: int) -> None:
    groups = split_by_token_budget(lengths, range(len(lengths)), budget)
    assert sorted(r for g in groups for r in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[r] for r in g) <= budget


def _shifted(shift: float) -> TrainBatch:
    """Rollout log-probs lowered by `shift` on loss tokens: the behaviour policy mu = pi_prox - shift, so every
    token's pi_prox / mu is exp(shift) once the old policy is recomputed."""
    batch = _batch()
    return dataclasses.replace(batch, rollout_log_probs=batch.rollout_log_probs - shift * batch.response_mask)


def _grads_with(kind: str, batch: TrainBatch, **fields: object) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    model = tiny_model()
    metrics = step(backend(model, grad_clip=1e9), batch, algorithm(kind, **fields)).metrics
    return grads(model), metrics


def test_decoupled_loss_equals_recomputed_ppo_when_proximal_equals_behaviour() -> None:
    plain, _ = _grads_with("ppo", _shifted(0.0), old_log_probs="recompute")
    decoupled, metrics = _grads_with("decoupled", _shifted(0.0))
    assert metrics["actor/behaviour_is_mean"] == pytest.approx(1.0, abs=1e-5)
    for name, value in plain.items():
        torch.testing.assert_close(decoupled[name], value, atol=1e-6, rtol=1e-4, msg=name)


def test_decoupled_loss_weights_by_proximal_over_behaviour_and_truncates_at_the_cap() -> None:
    plain, _ = _grads_with("ppo", _shifted(0.1), old_log_probs="recompute")
    decoupled, metrics = _grads_with("decoupled", _shifted(0.1))  # every token weighted exp(0.1)
    assert metrics["actor/behaviour_is_mean"] == pytest.approx(math.exp(0.1), rel=1e-4)
    for name, value in plain.items():
        torch.testing.assert_close(decoupled[name], value * math.exp(0.1), atol=1e-6, rtol=1e-3, msg=name)
    _, capped = _grads_with("decoupled", _shifted(0.1), is_cap=1.05)
    assert capped["actor/behaviour_is_mean"] == pytest.approx(1.05, rel=1e-6)


def test_mismatch_counts_only_tokens_sampled_by_the_weights_the_trainer_holds() -> None:
    model = tiny_model()
    samples = rollouts(model)
    stale = [dataclasses.replace(s, token_versions=[7] * len(s.token_versions)) for s in samples[:4]]
    batch = collate(stale + samples[4:], PAD)
    metrics = step(backend(model), batch).metrics
    fresh_tokens = sum(len(s.response_ids) for s in samples[4:])
    assert metrics["mismatch/replay/tokens"] == fresh_tokens < batch.num_loss_tokens
    assert metrics["mismatch/replay/abs_diff_mean"] < 2e-6


def test_the_no_replay_sample_skips_sequences_without_tokens_of_the_current_version() -> None:
    model = tiny_model()
    stale = [dataclasses.replace(s, token_versions=[7] * len(s.token_versions)) for s in rollouts(model)]
    metrics = step(backend(model), collate(stale, PAD)).metrics
    assert "mismatch/no_replay/tokens" not in metrics  # nothing to compare: no extra forward either
    assert metrics["mismatch/replay/tokens"] == 0 and "mismatch/replay/abs_diff_mean" not in metrics


def test_gspo_clips_the_sequence_ratio_and_aggregates_per_sequence() -> None:
    metrics = step(backend(tiny_model()), _shifted(0.01), algorithm("gspo", old_log_probs="rollout")).metrics
    # every token's log-ratio is +0.01 before the update: each sequence ratio exp(0.01) is above 1 + 4e-4
    assert metrics["actor/ratio_mean"] == pytest.approx(math.exp(0.01), rel=1e-4)
    assert metrics["actor/pg_clipfrac"] > 0


@pytest.mark.parametrize("mode", ["loss", "reward"])
def test_a_kl_term_to_the_reference_is_zero_before_the_policy_moves_and_positive_after(mode: str) -> None:
    model = tiny_model()
    batch = collate(rollouts(model), PAD)
    b = backend(model, reference=True)
    # the reward penalty reads the old policy: recomputed, so that it moves with the weights (the rollout's would not)
    alg = algorithm("ppo", kl=KLConfig(coef=0.1, estimator="k3", mode=mode), old_log_probs="recompute")
    first = step(b, batch, alg).metrics
    second = step(b, batch, alg).metrics
    key = "actor/kl_loss" if mode == "loss" else "kl_penalty/kl_mean"
    assert first[key] == pytest.approx(0.0, abs=1e-9)  # policy == reference at the first forward
    assert second[key] > 1e-6


def test_rollout_correction_rejects_tokens_outside_the_band_and_reports_it() -> None:
    correction = CorrectionConfig(is_level="token", is_cap=2.0, reject_token=(0.5, 1.5))
    alg = algorithm("ppo", correction=correction, old_log_probs="recompute")
    metrics = step(backend(tiny_model()), _shifted(1.0), alg).metrics
    # pi_train / mu = e on every token: outside [0.5, 1.5], so every token leaves the loss
    assert metrics["rollout_corr/masked_token_frac"] == pytest.approx(1.0)
    assert metrics["actor/skipped_empty_mini_batches"] == 1.0
    kept = step(backend(tiny_model()), _shifted(0.1), alg).metrics
    assert kept["rollout_corr/masked_token_frac"] == 0.0 and kept["rollout_corr/is_mean"] == pytest.approx(
        math.exp(0.1), rel=1e-4
    )


def test_importance_weights_in_bypass_mode_or_on_top_of_decoupled_ppo_are_refused() -> None:
    with pytest.raises(ValueError, match="count twice"):
        algorithm("ppo", correction=CorrectionConfig(is_level="token"))
    with pytest.raises(ValueError, match="already weights each token"):
        algorithm("decoupled", correction=CorrectionConfig(is_level="sequence"))
    algorithm("ppo", correction=CorrectionConfig(reject_token=(0.5, 2.0)))  # rejection alone works in bypass mode


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_every_advantage_estimator_trains_and_keeps_pads_at_zero(estimator: str) -> None:
    batch = _batch(pad_to=11)
    result = step(backend(tiny_model()), batch, algorithm("ppo", advantage=estimator))
    assert result.metrics["actor/optimizer_steps"] == 1.0 and math.isfinite(result.metrics["actor/pg_loss"])
    assert any(a != 0.0 for a in result.advantages)


def test_seq_mean_token_sum_norm_divides_by_the_constant_loss_scale_factor() -> None:
    batch = _batch()
    summed = step(backend(tiny_model()), batch, algorithm("ppo", agg_mode="seq-mean-token-sum")).metrics
    normed = step(
        backend(tiny_model()), batch, algorithm("ppo", agg_mode="seq-mean-token-sum-norm", loss_scale_factor=4.0)
    ).metrics
    assert normed["actor/pg_loss"] == pytest.approx(summed["actor/pg_loss"] / 4.0, rel=1e-6)
