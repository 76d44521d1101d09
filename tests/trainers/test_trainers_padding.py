"""Inert padding: the count divides, real samples are never copied, pads change no loss, advantage or metric."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trainers.advantages import broadcast_to_tokens, grpo_advantages, rloo_advantages
from trainers.aggregation import count_nonempty_seqs, count_tokens
from trainers.batch import collate
from trainers.padding import (
    PaddingNotInertError,
    assert_inert,
    pad_to_multiple,
    quality_mask,
    required_multiple,
)
from trainers.policy_loss import ppo_clip_loss
from trainers.sample import TrainSample


def _real(i: int, group: str, reward: float, length: int = 3) -> TrainSample:
    return TrainSample(
        uid=f"s{i}",
        group_id=group,
        data_source="toy",
        prompt_ids=[1, 2],
        response_ids=list(range(3, 3 + length)),
        loss_mask=[1] * length,
        rollout_log_probs=[-0.5] * length,
        token_versions=[0] * length,
        reward=reward,
        acc=reward,
    )


def _reals(n: int) -> list[TrainSample]:
    return [_real(i, f"g{i // 3}", float((i * 7) % 3 == 0), length=2 + i % 4) for i in range(n)]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 40), st.integers(1, 16))
def test_padded_count_divides_and_real_samples_come_first_uncopied(n: int, multiple: int) -> None:
    reals = _reals(n)
    out = pad_to_multiple(reals, multiple, pad_token_id=0)
    assert len(out) % multiple == 0 and len(out) - n < multiple
    assert all(a is b for a, b in zip(out[:n], reals, strict=True))
    assert all(s.is_padding for s in out[n:])
    assert len({s.uid for s in out}) == len(out)
    assert_inert(out)


def test_no_pads_when_the_count_already_divides() -> None:
    reals = _reals(6)
    assert pad_to_multiple(reals, 3, pad_token_id=0) == reals


def test_required_multiple_is_the_lcm_of_dp_and_mini_batch_sizes() -> None:
    assert required_multiple(2, 15 * 8) == 120  # the #5969 test: dp 2, mini 15 prompts x n 8
    assert required_multiple(4) == 4 and required_multiple(4, 6, 10) == 60
    with pytest.raises(ValueError, match="positive ints"):
        required_multiple(0, 4)


def test_pads_get_exactly_zero_grpo_and_rloo_advantage_and_leave_real_ones_unchanged() -> None:
    reals = _reals(7)
    padded = pad_to_multiple(reals, 4, pad_token_id=0)
    scores = torch.tensor([s.reward for s in padded], dtype=torch.float64)
    groups = [s.group_id for s in padded]
    for fn in (grpo_advantages, rloo_advantages):
        adv = fn(scores, groups)
        assert adv[7:].tolist() == [0.0] * (len(padded) - 7)
        assert torch.equal(adv[:7], fn(scores[:7], groups[:7]))
        assert_inert(padded, adv)
    single = pad_to_multiple(_reals(3), 4, pad_token_id=0)  # one pad: a singleton group keeps its 0 score
    assert float(grpo_advantages(torch.tensor([s.reward for s in single]), [s.group_id for s in single])[3]) == 0.0


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_pads_change_neither_the_loss_nor_its_gradient(mode: str) -> None:
    reals = _reals(5)
    padded = pad_to_multiple(reals, 4, pad_token_id=0)
    full, real = collate(padded, pad_token_id=0), collate(reals, pad_token_id=0)
    gen = torch.Generator().manual_seed(0)
    lp = (torch.randn(full.response_mask.shape, generator=gen, dtype=torch.float64) * 0.1 - 1).requires_grad_(True)
    old = lp.detach() + torch.randn(full.response_mask.shape, generator=gen, dtype=torch.float64) * 0.1
    groups = full.group_ids
    adv = broadcast_to_tokens(grpo_advantages(full.rewards.double(), groups), full.response_mask.double())
    m = full.response_mask.double()
    assert count_tokens(m) == count_tokens(real.response_mask) and count_nonempty_seqs(m) == 5
    loss_p, _ = ppo_clip_loss(lp, old, adv, m, agg_mode=mode)
    (grad_p,) = torch.autograd.grad(loss_p, lp)
    loss_r, _ = ppo_clip_loss(lp[:5], old[:5], adv[:5], real.response_mask.double(), agg_mode=mode)
    (grad_r,) = torch.autograd.grad(loss_r, lp)
    assert float(loss_p.detach()) == pytest.approx(float(loss_r.detach()), abs=1e-12)
    assert torch.allclose(grad_p, grad_r, atol=1e-15) and bool((grad_p[5:] == 0).all())


def test_quality_mask_excludes_pads_from_metrics() -> None:
    reals = _reals(5)
    padded = pad_to_multiple(reals, 8, pad_token_id=0)
    q = quality_mask(padded)
    assert q.tolist() == [True] * 5 + [False] * 3
    rewards = torch.tensor([s.reward for s in padded])
    assert float(rewards[q].mean()) == pytest.approx(sum(s.reward for s in reals) / 5)
    with pytest.raises(ValueError, match="at least one real sample"):
        quality_mask(padded[5:])


def test_assert_inert_catches_every_way_a_pad_could_leak() -> None:
    padded = pad_to_multiple(_reals(3), 4, pad_token_id=0)
    pad = padded[3]
    for field, value, match in [
        ("reward", 1.0, "reward 0.0"),
        ("loss_mask", [1], "all-zero loss mask"),
        ("group_id", "g0", "real group"),
    ]:
        original = getattr(pad, field)
        setattr(pad, field, value)
        with pytest.raises(PaddingNotInertError, match=match):
            assert_inert(padded)
        setattr(pad, field, original)
    with pytest.raises(PaddingNotInertError, match="unique samples"):
        assert_inert([*padded[:3], padded[0]])
    with pytest.raises(PaddingNotInertError, match="0 advantage on pads"):
        assert_inert(padded, torch.tensor([0.5, -0.5, 0.0, 1e-9]))
    assert_inert(padded, torch.zeros(4, 6))
