"""FlowGRPO advantages: sample-level group means, global or group std with ddof, singleton groups, clamping, and
the zero-advantage filter."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainers.flow.advantages import flow_advantages, keep_for_training
from trainers.flow.config import FlowGRPOConfig

REWARDS = np.array([1.0, 0.0, 0.5, 0.5, 0.2, 0.8])
GROUPS = np.array([0, 0, 1, 1, 2, 2])


def test_global_std_divides_group_centred_rewards_by_the_batch_std():
    cfg = FlowGRPOConfig(std_mode="global", ddof=0, std_eps=0.0)
    adv = flow_advantages(REWARDS, GROUPS, cfg).values
    std = np.std(REWARDS)  # population std of the six sample rewards
    expected = np.array([0.5, -0.5, 0.0, 0.0, -0.3, 0.3]) / std
    np.testing.assert_allclose(adv, expected, rtol=1e-6)


def test_group_std_uses_each_group_own_std_and_ddof():
    cfg = FlowGRPOConfig(std_mode="group", ddof=1, std_eps=1e-4)
    adv = flow_advantages(REWARDS, GROUPS, cfg).values
    s0 = math.sqrt(((1 - 0.5) ** 2 + (0 - 0.5) ** 2) / 1)  # unbiased std of [1, 0]
    s2 = math.sqrt(((0.2 - 0.5) ** 2 + (0.8 - 0.5) ** 2) / 1)
    expected = [0.5 / (s0 + 1e-4), -0.5 / (s0 + 1e-4), 0.0, 0.0, -0.3 / (s2 + 1e-4), 0.3 / (s2 + 1e-4)]
    np.testing.assert_allclose(adv, expected, rtol=1e-6)


def test_without_std_normalisation_the_advantage_is_reward_minus_group_mean():
    cfg = FlowGRPOConfig(normalize_by_std=False)
    np.testing.assert_allclose(flow_advantages(REWARDS, GROUPS, cfg).values, [0.5, -0.5, 0, 0, -0.3, 0.3], atol=1e-7)


def test_sample_level_population_std_equals_the_std_of_the_time_expanded_tensor():
    rng = np.random.default_rng(0)
    rewards = rng.random(16)
    expanded = np.repeat(rewards[:, None], 10, axis=1)  # the reference repeats rewards over T = 10 steps
    assert np.std(expanded) == pytest.approx(np.std(rewards), rel=1e-12)
    # only Bessel's factor differs: sqrt(T (N - 1) / (N T - 1))
    ratio = np.std(expanded, ddof=1) / np.std(rewards, ddof=1)
    assert ratio == pytest.approx(math.sqrt(10 * 15 / (160 - 1)), rel=1e-12)


def test_a_singleton_group_gets_zero_advantage_and_a_warning():
    with pytest.warns(UserWarning, match="1 group"):
        result = flow_advantages(np.array([0.9, 0.1, 0.7]), np.array([0, 0, 1]), FlowGRPOConfig())
    assert result.values[2] == 0.0
    assert result.singleton_groups == 1
    assert result.values[0] > 0 > result.values[1]


def test_groups_of_two_or_more_give_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flow_advantages(REWARDS, GROUPS, FlowGRPOConfig())


def test_advantages_are_clamped_to_adv_clip_max():
    rewards = np.array([1.0] + [0.0] * 31)
    cfg = FlowGRPOConfig(std_mode="global", adv_clip_max=2.0)
    adv = flow_advantages(rewards, np.zeros(32, dtype=int), cfg).values
    assert adv.max() == pytest.approx(2.0)  # (1 - 1/32) / std = 5.4 before the clamp


def test_non_finite_rewards_are_refused():
    with pytest.raises(ValueError, match="finite"):
        flow_advantages(np.array([0.1, np.nan]), np.array([0, 0]), FlowGRPOConfig())


def test_bad_algorithm_settings_are_refused():
    for bad in ({"ddof": 2}, {"adv_clip_max": 0.0}, {"beta": -1.0}, {"clip_eps": 1.5}):
        with pytest.raises(ValueError):
            FlowGRPOConfig(**bad)


def test_the_default_clip_range_follows_the_log_prob_reduction():
    assert FlowGRPOConfig().clip_range("mean") == 1e-4
    assert FlowGRPOConfig().clip_range("sum") == 0.2
    assert FlowGRPOConfig(clip_eps=0.05).clip_range("mean") == 0.05


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.0, 1.0, -0.5]), min_size=1, max_size=40), st.integers(1, 6))
def test_the_filter_keeps_every_nonzero_sample_and_divisibility_when_possible(values, divisor):
    adv = np.array(values, dtype=np.float32)
    kept = keep_for_training(adv, divisor, np.random.default_rng(0))
    nonzero = set(np.flatnonzero(adv != 0).tolist())
    assert nonzero <= set(kept.tolist())
    assert list(kept) == sorted(set(kept.tolist()))
    if not nonzero:
        assert len(kept) == 0
    elif len(adv) - len(nonzero) >= (-len(nonzero)) % divisor:
        assert len(kept) % divisor == 0
