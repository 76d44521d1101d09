"""Rollout correction: TIS, IcePop, rejection filters and mismatch metrics against hand values."""

from __future__ import annotations

import math

import pytest
import torch
from trainers.algorithm.correction import CorrectionConfig
from trainers.rollout_correction import rollout_correction

T64 = torch.float64
ROLLOUT = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]], dtype=T64)
DELTA = torch.tensor([[math.log(3.0), math.log(0.5), 0.0], [math.log(1.2), math.log(1.1), 7.0]], dtype=T64)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=T64)  # the 7.0 sits on padding


def _run(cfg: CorrectionConfig) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    return rollout_correction(ROLLOUT + DELTA, ROLLOUT, MASK, cfg)


def test_token_tis_truncates_each_token_ratio() -> None:
    w, m, metrics = _run(CorrectionConfig(is_level="token", is_cap=2.0))
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 1.0], [1.2, 1.1, 0.0]], dtype=T64))
    assert torch.equal(m, MASK)
    assert metrics["rollout_corr/is_max"] == pytest.approx(2.0)
    assert metrics["rollout_corr/is_min"] == pytest.approx(0.5)
    assert metrics["rollout_corr/is_mean"] == pytest.approx(5.8 / 5)
    assert metrics["rollout_corr/is_modified_frac"] == pytest.approx(1 / 5)


def test_sequence_tis_uses_the_product_of_ratios_over_the_mask() -> None:
    w, _, metrics = _run(CorrectionConfig(is_level="sequence", is_cap=2.0))
    # sequence 0: 3 * 0.5 * 1 = 1.5; sequence 1: 1.2 * 1.1 = 1.32 (the padded 7.0 is ignored)
    assert torch.allclose(w, torch.tensor([[1.5, 1.5, 1.5], [1.32, 1.32, 0.0]], dtype=T64))
    assert metrics["rollout_corr/is_mean"] == pytest.approx((1.5 + 1.32) / 2)
    ess = (1.5 + 1.32) ** 2 / (2 * (1.5**2 + 1.32**2))
    assert metrics["rollout_corr/is_ess"] == pytest.approx(ess)


def test_icepop_zeroes_weights_outside_the_band_but_keeps_the_mask() -> None:
    w, m, metrics = _run(CorrectionConfig(is_level="token", is_band=(0.8, 2.0)))
    assert torch.allclose(w, torch.tensor([[0.0, 0.0, 1.0], [1.2, 1.1, 0.0]], dtype=T64))
    assert torch.equal(m, MASK)
    assert metrics["rollout_corr/is_modified_frac"] == pytest.approx(2 / 5)


def test_token_rejection_masks_single_tokens() -> None:
    w, m, metrics = _run(CorrectionConfig(reject_token=(0.6, 2.0)))
    assert m.tolist() == [[0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
    assert torch.equal(w, m)  # no IS: weights are 1 on the kept mask
    assert metrics["rollout_corr/masked_token_frac"] == pytest.approx(2 / 5)
    assert metrics["rollout_corr/masked_seq_frac"] == 0.0


def test_sequence_rejection_by_sum_and_by_geometric_mean() -> None:
    _, m_sum, metrics = _run(CorrectionConfig(is_level="sequence", reject_seq_sum=(0.5, 1.4)))  # 1.5 out, 1.32 in
    assert m_sum.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    assert metrics["rollout_corr/masked_seq_frac"] == pytest.approx(0.5)
    # geometric means: 1.5 ** (1/3) = 1.1447 and 1.32 ** (1/2) = 1.1489
    _, m_mean, _ = _run(CorrectionConfig(reject_seq_mean=(0.9, 1.146)))
    assert m_mean.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    _, m_both, _ = _run(CorrectionConfig(reject_seq_mean=(0.9, 1.146), reject_token=(0.6, 2.0)))
    assert m_both.tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]  # every filter must pass


def test_weights_are_detached_and_default_config_is_a_no_op() -> None:
    train = (ROLLOUT + DELTA).requires_grad_(True)
    w, m, metrics = rollout_correction(train, ROLLOUT, MASK, CorrectionConfig())
    assert not w.requires_grad and torch.equal(w, MASK) and torch.equal(m, MASK)
    assert metrics["rollout_corr/is_ess"] == 1.0


def test_mismatch_k3_equals_the_exact_kl_of_rollout_from_train_by_enumeration() -> None:
    # tokens drawn from the rollout policy mu in exact proportions: x0, x0, x1, x2 for mu = (1/2, 1/4, 1/4)
    mu = torch.tensor([0.5, 0.25, 0.25], dtype=T64)
    pi = torch.tensor([0.2, 0.3, 0.5], dtype=T64)
    idx = [0, 0, 1, 2]
    rollout = mu.log()[idx].unsqueeze(0)
    train = pi.log()[idx].unsqueeze(0)
    _, _, metrics = rollout_correction(train, rollout, torch.ones(1, 4, dtype=T64), CorrectionConfig())
    kl = float((mu * (mu.log() - pi.log())).sum())
    assert metrics["rollout_corr/kl_k3"] == pytest.approx(kl, abs=1e-12)
    assert metrics["rollout_corr/kl_k1"] == pytest.approx(kl, abs=1e-12)
    assert metrics["rollout_corr/abs_diff"] == pytest.approx(float((mu.log() - pi.log())[idx].abs().mean()))


def test_invalid_configs_and_inputs_raise() -> None:
    with pytest.raises(ValueError, match="at most one"):
        CorrectionConfig(is_level="token", is_cap=2.0, is_band=(0.5, 2.0))
    with pytest.raises(ValueError, match="need is_level"):
        CorrectionConfig(is_cap=2.0)
    with pytest.raises(ValueError, match="0 <= lo < hi"):
        CorrectionConfig(reject_token=(2.0, 1.0))
    with pytest.raises(ValueError, match="all-zero mask"):
        rollout_correction(ROLLOUT, ROLLOUT, torch.zeros(2, 3), CorrectionConfig())
