"""The FlowGRPO loss against hand values: per-step clipped ratio, mean over samples and steps, the KL term."""

from __future__ import annotations

import math

import pytest
import torch
from trainers.flow.loss import FlowLossInputs, flow_grpo_loss


def _inputs(lp, old, adv, **kw) -> FlowLossInputs:
    b = len(lp)
    base = dict(
        mean=torch.zeros(b, 1, 2, 2), std=torch.tensor(0.5), num_samples=float(b), num_steps=1, reduction="mean"
    )
    return FlowLossInputs(torch.tensor(lp), torch.tensor(old), torch.tensor(adv), **(base | kw))


def test_unclipped_ratio_gives_minus_advantage_times_ratio():
    out = flow_grpo_loss(_inputs([0.01], [0.0], [2.0]), clip_eps=0.2, beta=0.0)
    assert float(out.loss) == pytest.approx(-2.0 * math.exp(0.01), rel=1e-6)


def test_a_positive_advantage_is_clipped_above_and_a_negative_one_below():
    eps = 1e-4
    pos = flow_grpo_loss(_inputs([0.01], [0.0], [1.0]), clip_eps=eps, beta=0.0)
    assert float(pos.loss) == pytest.approx(-(1 + eps), rel=1e-6)  # max(-r, -(1 + eps)) with r > 1 + eps
    neg = flow_grpo_loss(_inputs([-0.01], [0.0], [-1.0]), clip_eps=eps, beta=0.0)
    assert float(neg.loss) == pytest.approx(1 - eps, rel=1e-6)  # max(r, 1 - eps) with r < 1 - eps
    assert float(pos.means["actor/clip_frac"]) == 1.0


def test_the_loss_is_the_mean_over_the_mini_batch_samples_and_steps():
    inputs = _inputs([0.0, 0.0], [0.0, 0.0], [1.0, -3.0], num_samples=4.0, num_steps=2)
    out = flow_grpo_loss(inputs, clip_eps=0.2, beta=0.0)
    assert float(out.loss) == pytest.approx((-1.0 + 3.0) / (4 * 2))


def test_the_kl_term_is_the_per_element_gaussian_kl_reduced_like_the_log_prob():
    mean = torch.tensor([[[[0.1, 0.2], [0.3, 0.4]]]])
    ref = torch.zeros_like(mean)
    std = torch.tensor(0.5)
    kl_mean = float(((mean - ref) ** 2 / (2 * std**2)).mean())
    for reduction, kl in (("mean", kl_mean), ("sum", kl_mean * 4)):
        inputs = _inputs([0.0], [0.0], [0.0], mean=mean, std=std, ref_mean=ref, reduction=reduction)
        out = flow_grpo_loss(inputs, clip_eps=0.2, beta=0.5)
        assert float(out.sums["actor/kl_ref"]) == pytest.approx(kl, rel=1e-6)
        assert float(out.loss) == pytest.approx(0.5 * kl, rel=1e-6)


def test_beta_without_reference_means_is_an_error():
    with pytest.raises(ValueError, match="reference"):
        flow_grpo_loss(_inputs([0.0], [0.0], [1.0]), clip_eps=0.2, beta=0.1)


def test_behaviour_weights_scale_each_sample_policy_term():
    plain = _inputs([0.0, 0.0], [0.0, 0.0], [1.0, -1.0])
    weighted = _inputs([0.0, 0.0], [0.0, 0.0], [1.0, -1.0], behaviour_weights=torch.tensor([0.5, 2.0]))
    assert float(flow_grpo_loss(plain, clip_eps=0.2, beta=0.0).loss) == pytest.approx(0.0)
    assert float(flow_grpo_loss(weighted, clip_eps=0.2, beta=0.0).loss) == pytest.approx((-0.5 + 2.0) / 2)
