"""KL estimators: values, clamps, exact expectations and expected gradients by enumeration."""

from __future__ import annotations

import math

import pytest
import torch
from trainers.aggregation import aggregate
from trainers.kl import kl_estimate, kl_loss, kl_penalty_rewards

T64 = torch.float64


def _categorical(seed: int, v: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    theta = (0.7 * torch.randn(v, generator=gen, dtype=T64)).requires_grad_(True)
    ref = torch.log_softmax(0.7 * torch.randn(v, generator=gen, dtype=T64), dim=0)  # ratios far below the clamp
    return theta, ref


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("k1", 0.5),
        ("kl", 0.5),
        ("abs", 0.5),
        ("k2", 0.125),
        ("mse", 0.125),
        ("k3", math.exp(-0.5) + 0.5 - 1),
        ("low_var_kl", math.exp(-0.5) + 0.5 - 1),
    ],
)
def test_each_kind_has_its_formula_value(kind: str, expected: float) -> None:
    out = kl_estimate(torch.tensor([[-1.0]], dtype=T64), torch.tensor([[-1.5]], dtype=T64), kind)
    assert float(out) == pytest.approx(expected, abs=1e-12)
    assert float(kl_estimate(torch.tensor([[-1.5]], dtype=T64), torch.tensor([[-1.0]], dtype=T64), "abs")) == 0.5


def test_k3_clamps_the_log_ratio_and_the_value() -> None:
    lp = torch.tensor([[-60.0, -1.0, -math.inf, 0.0]], dtype=T64)
    ref = torch.tensor([[-1.0, -60.0, 0.0, -3.0]], dtype=T64)
    out = kl_estimate(lp, ref, "k3")
    assert out.tolist() == [[10.0, 10.0, 10.0, math.exp(-3.0) + 3.0 - 1]]  # an infinite ratio is 10, not nan


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_k1_and_k3_expectations_are_exactly_the_kl(seed: int, kind: str) -> None:
    theta, ref = _categorical(seed)
    logp = torch.log_softmax(theta.detach(), dim=0)
    p = logp.exp()
    exact = float((p * (logp - ref)).sum())
    expectation = float((p * kl_estimate(logp, ref, kind)).sum())
    assert expectation == pytest.approx(exact, abs=1e-12)
    assert float((p * kl_estimate(logp, ref, "k2")).sum()) != pytest.approx(exact, abs=1e-3)


def _expected_grad(kind: str, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(E_{y~p}[∇θ kN(y)] with p held fixed as sampling weights, ∇θ KL(p‖q), ∇θ KL(q‖p))."""
    theta, ref = _categorical(seed)
    logp = torch.log_softmax(theta, dim=0)
    weights = logp.detach().exp()
    (g_est,) = torch.autograd.grad((weights * kl_estimate(logp, ref, kind)).sum(), theta)
    logp = torch.log_softmax(theta, dim=0)
    (g_fwd,) = torch.autograd.grad((logp.exp() * (logp - ref)).sum(), theta)
    logp = torch.log_softmax(theta, dim=0)
    (g_rev,) = torch.autograd.grad((ref.exp() * (ref - logp)).sum(), theta)
    return g_est, g_fwd, g_rev


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["k2", "k1+", "k3+", "low_var_kl+", "abs+"])
def test_k2_gradient_and_straight_through_kinds_are_unbiased_for_the_kl_gradient(seed: int, kind: str) -> None:
    g_est, g_fwd, _ = _expected_grad(kind, seed)
    assert torch.allclose(g_est, g_fwd, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_plain_k3_gradient_is_the_reverse_kl_gradient(seed: int) -> None:
    g_est, g_fwd, g_rev = _expected_grad("k3", seed)
    assert torch.allclose(g_est, g_rev, atol=1e-12)
    assert not torch.allclose(g_est, g_fwd, atol=1e-3)


def test_straight_through_keeps_the_forward_value() -> None:
    lp, ref = torch.tensor([[-0.3, -2.0]], dtype=T64), torch.tensor([[-1.1, -0.4]], dtype=T64)
    for kind in ("k1", "abs", "k3"):
        assert torch.equal(kl_estimate(lp, ref, kind + "+"), kl_estimate(lp, ref, kind))
    with pytest.raises(ValueError, match="expected one of"):
        kl_estimate(lp, ref, "k4")


def test_kl_penalty_subtracts_coef_times_kl_on_loss_tokens_only() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0]], dtype=T64)
    old = torch.tensor([[-1.0, -2.0, -0.5]], dtype=T64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -0.5]], dtype=T64)
    mask = torch.tensor([[1.0, 0.0, 1.0]], dtype=T64)
    out, metrics = kl_penalty_rewards(rewards, old, ref, mask, "k1", coef=0.1)
    assert out[0].tolist() == pytest.approx([-0.05, 0.0, 1.0])
    assert not out.requires_grad
    assert metrics["kl_penalty/kl_mean"] == pytest.approx(0.25)


def test_kl_loss_aggregates_the_estimate_with_the_policy_mode() -> None:
    gen = torch.Generator().manual_seed(1)
    lp, ref = torch.randn(2, 4, generator=gen, dtype=T64), torch.randn(2, 4, generator=gen, dtype=T64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=T64)
    for mode in ("token-mean", "seq-mean-token-mean"):
        loss, _ = kl_loss(lp, ref, mask, kind="k3", agg_mode=mode)
        assert float(loss) == pytest.approx(float(aggregate(kl_estimate(lp, ref, "k3"), mask, mode)))
