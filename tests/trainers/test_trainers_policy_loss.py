"""PPO clip / dual clip / decoupled PPO / GSPO against hand-computed values and gradients."""

from __future__ import annotations

import math

import pytest
import torch
from trainers.aggregation import aggregate
from trainers.policy_loss import decoupled_ppo_loss, gspo_loss, ppo_clip_loss

T64 = torch.float64
# four tokens of one sequence: (advantage, ratio) = (1, 1.5), (1, 0.5), (-1, 5), (-1, 0.5)
ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=T64)
RATIO = torch.tensor([[1.5, 0.5, 5.0, 0.5]], dtype=T64)
MASK = torch.ones(1, 4, dtype=T64)


def _lp() -> tuple[torch.Tensor, torch.Tensor]:
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], dtype=T64)
    return (old + RATIO.log()).requires_grad_(True), old


def test_ppo_clip_and_dual_clip_match_hand_values_and_fractions() -> None:
    lp, old = _lp()
    loss, metrics = ppo_clip_loss(lp, old, ADV, MASK)
    # per token: max(-1.5, -1.2) = -1.2; max(-0.5, -0.8) = -0.5; min(max(5, 1.2), 3) = 3; max(0.5, 0.8) = 0.8
    assert float(loss.detach()) == pytest.approx((-1.2 - 0.5 + 3.0 + 0.8) / 4)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(0.25)
    assert metrics["actor/ratio_max"] == pytest.approx(5.0)
    assert metrics["actor/ratio_mean"] == pytest.approx(7.5 / 4)
    assert metrics["actor/ppo_kl"] == pytest.approx(-float(RATIO.log().mean()))


def test_ppo_gradient_is_zero_on_clipped_tokens_and_minus_a_ratio_elsewhere() -> None:
    lp, old = _lp()
    loss, _ = ppo_clip_loss(lp, old, ADV, MASK)
    (grad,) = torch.autograd.grad(loss, lp)
    assert grad[0].tolist() == pytest.approx([0.0, -0.5 / 4, 0.0, 0.0])


def test_without_dual_clip_a_negative_advantage_is_unbounded() -> None:
    lp, old = _lp()
    loss, metrics = ppo_clip_loss(lp, old, ADV, MASK, dual_clip_c=None)
    assert float(loss.detach()) == pytest.approx((-1.2 - 0.5 + 5.0 + 0.8) / 4)
    assert metrics["actor/pg_clipfrac_lower"] == 0.0
    with pytest.raises(ValueError, match="dual_clip_c"):
        ppo_clip_loss(lp, old, ADV, MASK, dual_clip_c=1.0)


def test_clip_higher_widens_only_the_upper_side() -> None:
    lp, old = _lp()
    loss, _ = ppo_clip_loss(lp, old, ADV, MASK, clip_high=0.28)
    assert float(loss.detach()) == pytest.approx((-1.28 - 0.5 + 3.0 + 0.8) / 4)


def test_is_weights_scale_each_token_and_receive_no_gradient() -> None:
    lp, old = _lp()
    w = torch.tensor([[2.0, 0.0, 1.0, 0.5]], dtype=T64, requires_grad=True)
    loss, _ = ppo_clip_loss(lp, old, ADV, MASK, is_weights=w)
    assert float(loss.detach()) == pytest.approx((-2.4 + 0.0 + 3.0 + 0.4) / 4)
    assert torch.autograd.grad(loss, [lp, w], allow_unused=True)[1] is None


def test_masked_tokens_do_not_enter_loss_or_metrics() -> None:
    lp, old = _lp()
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0]], dtype=T64)
    loss, metrics = ppo_clip_loss(lp, old, ADV, mask)
    assert float(loss.detach()) == pytest.approx((-1.2 - 0.5) / 2)
    assert metrics["actor/pg_clipfrac_lower"] == 0.0 and metrics["actor/ratio_max"] == pytest.approx(1.5)


def test_decoupled_ppo_is_ppo_against_the_proximal_policy_weighted_by_prox_over_behaviour() -> None:
    gen = torch.Generator().manual_seed(0)
    lp = torch.randn(3, 5, generator=gen, dtype=T64) * 0.3 - 1
    prox = lp.detach() + torch.randn(3, 5, generator=gen, dtype=T64) * 0.3
    behav = prox + torch.randn(3, 5, generator=gen, dtype=T64) * 0.3
    adv = torch.randn(3, 5, generator=gen, dtype=T64)
    mask = torch.ones(3, 5, dtype=T64)
    got, _ = decoupled_ppo_loss(lp, prox, behav, adv, mask)
    want, _ = ppo_clip_loss(lp, prox, adv, mask, is_weights=torch.exp(prox - behav))
    assert float(got) == pytest.approx(float(want), abs=1e-12)
    same, _ = decoupled_ppo_loss(lp, prox, prox, adv, mask)
    plain, _ = ppo_clip_loss(lp, prox, adv, mask)
    assert float(same) == pytest.approx(float(plain), abs=1e-12)
    capped, _ = decoupled_ppo_loss(lp, prox, behav, adv, mask, is_cap=1.0)
    want_capped, _ = ppo_clip_loss(lp, prox, adv, mask, is_weights=torch.exp(prox - behav).clamp(max=1.0))
    assert float(capped) == pytest.approx(float(want_capped), abs=1e-12)


def test_gspo_uses_the_sequence_mean_ratio_and_seq_mean_token_mean() -> None:
    old = torch.full((2, 3), -1.0, dtype=T64)
    delta = torch.tensor([[1e-4, -1e-4, 3e-4], [2e-4, 0.0, 0.0]], dtype=T64)
    lp = (old + delta).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=T64)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]], dtype=T64)
    loss, metrics = gspo_loss(lp, old, adv, mask)
    rho = [1e-4, 2e-4]  # sequence means of the log-ratio over the mask
    s = [math.exp(r) for r in rho]  # both inside [1 - 3e-4, 1 + 4e-4]: no clipping
    assert float(loss.detach()) == pytest.approx((-1.0 * s[0] + 2.0 * s[1]) / 2, abs=1e-12)
    (grad,) = torch.autograd.grad(loss, lp)
    want = torch.tensor([[-s[0] / 3 / 2] * 3, [2.0 * s[1] / 2, 0.0, 0.0]], dtype=T64)
    assert torch.allclose(grad, want, atol=1e-12)
    assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/pg_clipfrac_lower"] == 0.0


def test_gspo_clips_whole_sequences_and_ignores_empty_rows() -> None:
    old = torch.full((3, 2), -1.0, dtype=T64)
    lp = (old + torch.tensor([[0.01, 0.01], [0.0, 0.0], [5.0, 5.0]], dtype=T64)).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]], dtype=T64)
    adv = torch.ones(3, 2, dtype=T64)
    loss, metrics = gspo_loss(lp, old, adv, mask)
    assert float(loss.detach()) == pytest.approx((-(1 + 4e-4) - 1.0) / 2)
    (grad,) = torch.autograd.grad(loss, lp)
    assert grad[0].tolist() == [0.0, 0.0]  # the first sequence is clipped as a whole
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)


def test_ppo_loss_uses_the_aggregation_mode_and_global_counts() -> None:
    lp, old = _lp()
    loss, _ = ppo_clip_loss(lp, old, ADV, MASK, agg_mode="token-sum")
    assert float(loss.detach()) == pytest.approx(-1.2 - 0.5 + 3.0 + 0.8)
    loss_g, _ = ppo_clip_loss(lp, old, ADV, MASK, num_tokens=8.0)
    assert float(loss_g.detach()) == pytest.approx((-1.2 - 0.5 + 3.0 + 0.8) / 8)
    per_token = torch.tensor([[-1.2, -0.5, 3.0, 0.8]], dtype=T64)
    for mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        got, _ = ppo_clip_loss(lp, old, ADV, MASK, agg_mode=mode)
        assert float(got.detach()) == pytest.approx(float(aggregate(per_token, MASK, mode)))
