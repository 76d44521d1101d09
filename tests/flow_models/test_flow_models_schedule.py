"""`FlowSchedule` against diffusers' `FlowMatchEulerDiscreteScheduler` (the scheduler SD3 pipelines sample with)."""

from __future__ import annotations

import math

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from flow_models.schedule import FlowSchedule, shift_sigmas
from hypothesis import given, settings
from hypothesis import strategies as st


def diffusers_schedule(num_steps: int, shift: float, num_train_timesteps: int) -> tuple[torch.Tensor, torch.Tensor]:
    scheduler = FlowMatchEulerDiscreteScheduler(shift=shift, num_train_timesteps=num_train_timesteps)
    scheduler.set_timesteps(num_steps)
    return scheduler.sigmas, scheduler.timesteps


@pytest.mark.parametrize("num_train_timesteps", [1000, 100])
@pytest.mark.parametrize("shift", [1.0, 3.0, 0.5, 1.7, 2.0, 5.0])
@pytest.mark.parametrize("num_steps", [1, 2, 5, 10, 28, 40])
def test_sigmas_and_timesteps_equal_diffusers_flow_match_euler(
    num_steps: int, shift: float, num_train_timesteps: int
) -> None:
    ours = FlowSchedule(num_steps, shift, num_train_timesteps)
    sigmas, timesteps = diffusers_schedule(num_steps, shift, num_train_timesteps)
    assert ours.sigmas().dtype == sigmas.dtype == torch.float32
    assert ours.sigmas().shape == (num_steps + 1,)
    assert ours.timesteps().shape == (num_steps,)
    torch.testing.assert_close(ours.sigmas(), sigmas, rtol=0, atol=1e-6)
    torch.testing.assert_close(ours.timesteps(), timesteps, rtol=0, atol=1e-6)


def test_shift_three_hand_values() -> None:
    """SD3's shift 3 over 4 steps: the linear grid 1 .. shift(1/1000) then shifted again, as diffusers does."""
    low = 3 * 0.001 / (1 + 2 * 0.001)
    expected = [3 * t / (1 + 2 * t) for t in (1.0, 1 - (1 - low) / 3, 1 - 2 * (1 - low) / 3, low)] + [0.0]
    torch.testing.assert_close(FlowSchedule(4, 3.0).sigmas(), torch.tensor(expected), rtol=0, atol=1e-6)


def test_first_sigma_is_exactly_one_even_where_diffusers_rounds_it() -> None:
    """At some shifts below 1 diffusers' float32 `shift * 1 / (1 + (shift - 1))` is not 1 (0.9999976 at shift 0.1,
    1.0000015 at 0.15: the SDE's `sigma == 1` guard would then miss, or take the sqrt of a negative). We keep
    sigma_0 = 1 exactly; the rest agrees to float32 rounding."""
    for shift in (0.1, 0.15):
        sigmas, _ = diffusers_schedule(10, shift, 1000)
        assert float(sigmas[0]) != 1.0
        ours = FlowSchedule(10, shift).sigmas()
        assert float(ours[0]) == 1.0
        torch.testing.assert_close(ours, sigmas, rtol=0, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(num_steps=st.integers(1, 200), shift=st.floats(0.05, 20.0), num_train_timesteps=st.integers(2, 2000))
def test_sigmas_strictly_decrease_from_one_to_zero(num_steps: int, shift: float, num_train_timesteps: int) -> None:
    schedule = FlowSchedule(num_steps, shift, num_train_timesteps)
    sigmas = schedule.sigmas()
    assert sigmas.dtype == torch.float32
    assert sigmas.shape == (num_steps + 1,)
    assert float(sigmas[0]) == 1.0
    assert float(sigmas[-1]) == 0.0
    assert bool((sigmas[1:] < sigmas[:-1]).all()), sigmas
    torch.testing.assert_close(schedule.timesteps(), sigmas[:-1] * num_train_timesteps, rtol=0, atol=0)


def test_shift_above_one_spends_more_steps_at_high_noise() -> None:
    plain, shifted = FlowSchedule(10, 1.0).sigmas(), FlowSchedule(10, 3.0).sigmas()
    assert bool((shifted[1:-1] > plain[1:-1]).all())
    assert shift_sigmas(torch.tensor([0.5]).numpy(), 3.0)[0] == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_steps": 0}, "num_steps: expected >= 1, got 0"),
        ({"num_steps": -3}, "num_steps: expected >= 1, got -3"),
        ({"num_steps": 10, "shift": 0.0}, "shift: expected > 0, got 0.0"),
        ({"num_steps": 10, "shift": -1.0}, "shift: expected > 0, got -1.0"),
        ({"num_steps": 10, "shift": math.nan}, "shift: expected > 0, got nan"),
        ({"num_steps": 10, "num_train_timesteps": 1}, "num_train_timesteps: expected >= 2, got 1"),
    ],
)
def test_bad_schedule_values_are_refused(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FlowSchedule(**kwargs)
