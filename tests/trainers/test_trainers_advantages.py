"""Advantage estimators against hand-computed values and brute-force loops."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trainers.advantages import (
    broadcast_to_tokens,
    gae,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    reinforce_pp_returns,
    rloo_advantages,
)

T64 = torch.float64


def test_grpo_normalises_by_unbiased_group_std_and_keeps_singleton_score() -> None:
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0], dtype=T64)
    adv = grpo_advantages(scores, ["a", "a", "a", "a", "b"])
    std = math.sqrt(1.0 / 3.0)  # unbiased std of [1, 0, 0, 1]
    expected = [0.5 / (std + 1e-6), -0.5 / (std + 1e-6), -0.5 / (std + 1e-6), 0.5 / (std + 1e-6), 5.0]
    assert torch.allclose(adv, torch.tensor(expected, dtype=T64), rtol=0, atol=1e-12)


def test_grpo_identical_rewards_give_exact_zero() -> None:
    adv = grpo_advantages(torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7]), [0, 0, 0, 1, 1])
    assert adv.tolist() == [0.0] * 5


def test_dr_grpo_subtracts_the_group_mean_only() -> None:
    adv = grpo_advantages(torch.tensor([3.0, 1.0, 2.0, 4.0], dtype=T64), [0, 0, 0, 9], norm_by_std=False)
    assert adv.tolist() == [1.0, -1.0, 0.0, 4.0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.floats(-10, 10, allow_nan=False)), min_size=1, max_size=12),
    st.floats(-5, 5),
)
def test_grpo_group_sums_vanish_and_a_shift_changes_nothing(rows: list[tuple[int, float]], shift: float) -> None:
    groups = [g for g, _ in rows]
    scores = torch.tensor([s for _, s in rows], dtype=T64)
    adv = grpo_advantages(scores, groups)
    shifted = grpo_advantages(scores + shift, groups)
    for g in set(groups):
        idx = [i for i, x in enumerate(groups) if x == g]
        if len(idx) > 1:
            assert abs(float(adv[idx].sum())) < 1e-6
            assert torch.allclose(adv[idx], shifted[idx], atol=1e-5)
        else:
            assert float(adv[idx[0]]) == float(scores[idx[0]])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(-10, 10, allow_nan=False)), min_size=1, max_size=12))
def test_rloo_equals_leave_one_out_loop(rows: list[tuple[int, float]]) -> None:
    groups = [g for g, _ in rows]
    scores = [s for _, s in rows]
    adv = rloo_advantages(torch.tensor(scores, dtype=T64), groups)
    for i, (g, s) in enumerate(rows):
        others = [scores[j] for j in range(len(rows)) if groups[j] == g and j != i]
        expected = s if not others else s - sum(others) / len(others)
        assert abs(float(adv[i]) - expected) < 1e-9


def test_reinforce_pp_returns_skip_observation_tokens_without_discount() -> None:
    rewards = torch.tensor([[0.0, 9.0, 0.0, 1.0, 0.0]], dtype=T64)  # the 9.0 sits on a mask-0 token
    mask = torch.tensor([[1, 0, 1, 1, 0]], dtype=T64)
    returns = reinforce_pp_returns(rewards, mask, gamma=0.5)
    assert returns.tolist() == [[0.25, 0.0, 0.5, 1.0, 0.0]]


def test_reinforce_pp_advantages_are_batch_whitened_on_the_mask() -> None:
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(4, 6, generator=gen, dtype=T64)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], dtype=T64)
    adv = reinforce_pp_advantages(rewards, mask, gamma=0.9)
    sel = adv[mask.bool()]
    assert abs(float(sel.mean())) < 1e-9
    assert abs(float(sel.var(unbiased=True)) - 1.0) < 1e-6
    assert bool((adv[~mask.bool()] == 0).all())


def test_reinforce_pp_baseline_centres_groups_then_whitens() -> None:
    scores = torch.tensor([1.0, 3.0, 2.0, 6.0], dtype=T64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=T64)
    adv = reinforce_pp_baseline_advantages(scores, ["a", "a", "b", "b"], mask)
    centred = torch.tensor([-1.0, 1.0, -2.0, 2.0], dtype=T64)
    expected = masked_whiten(centred[:, None] * mask, mask) * mask
    assert torch.allclose(adv, expected)
    tok = centred[:, None].expand(4, 3)[mask.bool()]
    manual = (tok - tok.mean()) / torch.sqrt(tok.var(unbiased=True) + 1e-8)
    assert torch.allclose(adv[mask.bool()], manual)


def _standard_gae(r: list[float], v: list[float], gamma: float, lam: float) -> list[float]:
    out, running = [0.0] * len(r), 0.0
    for t in reversed(range(len(r))):
        next_v = v[t + 1] if t + 1 < len(r) else 0.0
        running = r[t] + gamma * next_v - v[t] + gamma * lam * running
        out[t] = running
    return out


@pytest.mark.parametrize("seed", range(5))
def test_gae_equals_standard_gae_on_the_loss_tokens_alone(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(3, 7, generator=gen, dtype=T64)
    values = torch.randn(3, 7, generator=gen, dtype=T64)
    mask = (torch.rand(3, 7, generator=gen) > 0.35).to(T64)
    mask[:, 0] = 1
    adv, returns = gae(rewards, values, mask, gamma=0.9, lam=0.8, whiten=False)
    for b in range(3):
        idx = [t for t in range(7) if mask[b, t] == 1]
        ref = _standard_gae([float(rewards[b, t]) for t in idx], [float(values[b, t]) for t in idx], 0.9, 0.8)
        got = [float(adv[b, t]) for t in idx]
        assert got == pytest.approx(ref, abs=1e-12)
        assert [float(returns[b, t]) for t in idx] == pytest.approx(
            [a + float(values[b, t]) for a, t in zip(ref, idx, strict=True)], abs=1e-12
        )
    assert bool((adv[mask == 0] == 0).all()) and bool((returns[mask == 0] == 0).all())


def test_gae_without_critic_is_the_reward_to_go_then_whitened() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]], dtype=T64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=T64)
    raw, returns = gae(rewards, None, mask, whiten=False)
    assert raw.tolist() == [[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]
    assert returns.tolist() == raw.tolist()
    white, _ = gae(rewards, None, mask)
    assert torch.allclose(white, masked_whiten(raw, mask) * mask)


def test_broadcast_puts_the_scalar_on_loss_tokens_only() -> None:
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), torch.tensor([[1, 1, 0], [0, 1, 1]]))
    assert out.tolist() == [[2.0, 2.0, 0.0], [0.0, -1.0, -1.0]]


def test_shape_and_count_errors_name_got_and_expected() -> None:
    with pytest.raises(ValueError, match="expected 3 entries"):
        grpo_advantages(torch.zeros(3), [0, 1])
    with pytest.raises(ValueError, match="at least 2 masked entries"):
        masked_whiten(torch.zeros(1, 3), torch.tensor([[0, 1, 0]]))
    with pytest.raises(ValueError, match=r"expected shape \[B, T\]"):
        gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
