"""`sde.step_gaussian` (Flow-GRPO's SDE step and the CPS variant) by hand values, and the windowed `sampler`."""

from __future__ import annotations

import math

import pytest
import torch
from flow_models.sampler import sample, window_log_prob
from flow_models.sampler_config import Reduction, SamplerConfig, SdeKind
from flow_models.schedule import FlowSchedule
from flow_models.sde import step_gaussian
from flow_models.velocity import VelocityMLP
from flow_models.velocity_config import VelocityConfig
from hypothesis import given, settings
from hypothesis import strategies as st

X = torch.tensor([[1.0, 2.0], [-0.5, 0.25]])
V = torch.tensor([[0.5, -1.0], [2.0, 0.0]])


def brute_force_log_prob(x_next: torch.Tensor, mean: torch.Tensor, std: float, reduction: Reduction) -> torch.Tensor:
    """Per-element Gaussian log-density written out in float64 from the formula, one element at a time."""
    rows = []
    for row_next, row_mean in zip(x_next.double().flatten(1), mean.double().flatten(1), strict=True):
        terms = [
            -((a - m) ** 2) / (2 * std**2) - math.log(std) - 0.5 * math.log(2 * math.pi)
            for a, m in zip(row_next.tolist(), row_mean.tolist(), strict=True)
        ]
        rows.append(sum(terms) / len(terms) if reduction == "mean" else sum(terms))
    return torch.tensor(rows, dtype=torch.float64)


def test_sde_step_hand_values() -> None:
    """sigma 0.5 -> 0.25, a = 0.7: std_t = 0.7 * sqrt(0.5 / 0.5) = 0.7, dt = -0.25, so
    mean = x (1 - 0.49 * 0.25 / 1) + v (1 + 0.49 * 0.5 / 1) (-0.25) = 0.8775 x - 0.31125 v, std = 0.7 * 0.5."""
    gaussian = step_gaussian(X, V, 0.5, 0.25, 0.7, "sde", sigma_max=0.9)
    torch.testing.assert_close(gaussian.mean, 0.8775 * X - 0.31125 * V, rtol=0, atol=1e-6)
    assert float(gaussian.std) == pytest.approx(0.35, abs=1e-7)
    assert gaussian.mean.dtype == gaussian.std.dtype == torch.float32


def test_cps_step_hand_values() -> None:
    """sigma 0.5 -> 0.25, a = 0.5: std = 0.25 sin(pi / 4) = sqrt(0.03125), sqrt(0.0625 - 0.03125) = the same, so
    mean = (x - 0.5 v) 0.75 + (x + 0.5 v) sqrt(0.03125)."""
    gaussian = step_gaussian(X, V, 0.5, 0.25, 0.5, "cps", sigma_max=0.9)
    root = math.sqrt(0.03125)
    torch.testing.assert_close(gaussian.mean, (X - 0.5 * V) * 0.75 + (X + 0.5 * V) * root, rtol=0, atol=1e-6)
    assert float(gaussian.std) == pytest.approx(root, abs=1e-7)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_sde_log_prob_equals_brute_force_gaussian_density(reduction: Reduction) -> None:
    gaussian = step_gaussian(X, V, 0.6, 0.45, 0.8, "sde", sigma_max=0.9)
    x_next = gaussian.sample(torch.tensor([[0.3, -1.2], [2.0, 0.1]]))
    expected = brute_force_log_prob(x_next, gaussian.mean, float(gaussian.std), reduction)
    torch.testing.assert_close(gaussian.log_prob(x_next, reduction).double(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cps_log_prob_is_unnormalised_negative_squared_error(reduction: Reduction) -> None:
    gaussian = step_gaussian(X, V, 0.6, 0.45, 0.8, "cps", sigma_max=0.9)
    noise = torch.tensor([[0.3, -1.2], [2.0, 0.1]])
    x_next = gaussian.sample(noise)
    per_element = -((float(gaussian.std) * noise) ** 2)
    expected = per_element.mean(dim=1) if reduction == "mean" else per_element.sum(dim=1)
    torch.testing.assert_close(gaussian.log_prob(x_next, reduction), expected, rtol=0, atol=1e-6)


def test_log_prob_treats_the_outcome_as_data() -> None:
    v = V.clone().requires_grad_(True)
    x_next = (X + 0.1).requires_grad_(True)
    step_gaussian(X, v, 0.6, 0.45, 0.8, "sde", sigma_max=0.9).log_prob(x_next, "mean").sum().backward()
    assert x_next.grad is None
    assert v.grad is not None and float(v.grad.abs().sum()) > 0


def test_sigma_one_endpoint_uses_sigma_max_and_is_finite() -> None:
    """At sigma = 1, `1 - sigma` would divide by zero; with sigma_max = sigmas[1] the first step's std is
    a * sqrt(1 / (1 - s1)) * sqrt(1 - s1) = a exactly."""
    sigmas = FlowSchedule(10, 3.0).sigmas()
    gaussian = step_gaussian(X, V, sigmas[0], sigmas[1], 0.7, "sde", sigma_max=sigmas[1])
    assert float(gaussian.std) == pytest.approx(0.7, rel=1e-5)
    assert bool(torch.isfinite(gaussian.mean).all())
    std_t = 0.7 * math.sqrt(1.0 / (1.0 - float(sigmas[1])))
    dt = float(sigmas[1] - sigmas[0])
    expected = X * (1 + std_t**2 * dt / 2) + V * (1 + 0.0) * dt
    torch.testing.assert_close(gaussian.mean, expected, rtol=0, atol=1e-5)
    x_next = gaussian.sample(torch.ones_like(X))
    assert bool(torch.isfinite(gaussian.log_prob(x_next, "sum")).all())


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_noise_level_zero_is_the_euler_step_and_has_no_density(kind: SdeKind) -> None:
    gaussian = step_gaussian(X, V, 0.6, 0.45, 0.0, kind, sigma_max=0.9)
    torch.testing.assert_close(gaussian.mean, X + (0.45 - 0.6) * V, rtol=0, atol=1e-6)
    assert float(gaussian.std) == 0.0
    with pytest.raises(ValueError, match="deterministic"):
        gaussian.log_prob(gaussian.mean, "mean")


def test_cps_step_to_sigma_zero_has_no_density() -> None:
    gaussian = step_gaussian(X, V, 0.3, 0.0, 0.7, "cps", sigma_max=0.9)
    torch.testing.assert_close(gaussian.mean, X - 0.3 * V, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="deterministic"):
        gaussian.log_prob(gaussian.mean, "mean")


@pytest.mark.parametrize(
    ("sigma", "sigma_next", "noise_level", "match"),
    [
        (0.5, 0.5, 0.7, "expected sigma > sigma_next, got 0.5 and 0.5"),
        (0.4, 0.6, 0.7, "expected sigma > sigma_next"),
        (0.5, 0.25, -0.1, "expected noise_level >= 0, got -0.1"),
    ],
)
def test_step_gaussian_refuses_bad_values(sigma: float, sigma_next: float, noise_level: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        step_gaussian(X, V, sigma, sigma_next, noise_level, "sde", sigma_max=0.9)


def random_velocity_mlp(seed: int, channels: int = 1, image_size: int = 4) -> VelocityMLP:
    """A small `VelocityMLP` whose (normally zero-initialised) out layer is random, so v depends on its inputs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = VelocityMLP(VelocityConfig(image_size=image_size, channels=channels, num_classes=3, hidden=32, depth=2))
        torch.nn.init.normal_(model.out.weight, std=0.3)
        torch.nn.init.normal_(model.out.bias, std=0.3)
    return model.eval()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_recomputed_window_log_probs_equal_the_rollouts_before_any_update(kind: SdeKind, reduction: Reduction) -> None:
    model = random_velocity_mlp(0)
    cfg = SamplerConfig(
        num_steps=6,
        shift=3.0,
        noise_level=0.8,
        sde_kind=kind,
        window_size=3,
        window_lo=0,
        window_hi=5,
        reduction=reduction,
    )
    generator = torch.Generator().manual_seed(1)
    noise = torch.randn((5, 1, 4, 4), generator=generator)
    labels = torch.tensor([0, 1, 2, 1, 0])
    rollout = sample(model, labels, noise, cfg, generator, window_start=cfg.draw_window_start(generator))
    assert rollout.log_probs.shape == (5, 3)
    assert float(model(noise, torch.ones(5), labels).detach().abs().mean()) > 0.1
    for k in range(cfg.window_size):
        log_prob, gaussian = window_log_prob(model, rollout, k, cfg)
        torch.testing.assert_close(log_prob, rollout.log_probs[:, k], rtol=0, atol=1e-6)
        assert gaussian.mean.shape == rollout.latents[:, k].shape
    changed = window_log_prob(random_velocity_mlp(7), rollout, 0, cfg)[0].detach()
    assert float((changed - rollout.log_probs[:, 0]).abs().max()) > 1e-4


@st.composite
def sampler_configs(draw: st.DrawFn) -> SamplerConfig:
    num_steps = draw(st.integers(1, 12))
    kind = draw(st.sampled_from(["sde", "cps"]))
    top = num_steps - 1 if kind == "cps" else num_steps
    window_size = draw(st.integers(0, top)) if top >= 1 else 0
    lo = draw(st.integers(0, top - window_size)) if window_size else 0
    hi = draw(st.integers(lo + window_size, top)) if window_size else num_steps
    return SamplerConfig(
        num_steps=num_steps,
        shift=draw(st.floats(0.5, 4.0)),
        noise_level=0.7,
        sde_kind=kind,
        window_size=window_size,
        window_lo=lo,
        window_hi=hi,
    )


@settings(max_examples=60, deadline=None)
@given(cfg=sampler_configs(), seed=st.integers(0, 2**16))
def test_window_lies_in_its_range_and_rollout_shapes_follow(cfg: SamplerConfig, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    start = cfg.draw_window_start(generator)
    lo, hi = cfg.window_lo, cfg.window_hi
    if cfg.window_size:
        assert lo <= start <= hi - cfg.window_size
    rollout = sample(
        lambda x, s, y: -x * s[:, None, None, None],
        torch.zeros(2, dtype=torch.long),
        torch.randn((2, 1, 2, 2), generator=generator),
        cfg,
        generator,
        window_start=start,
    )
    assert rollout.window == tuple(range(start, start + cfg.window_size))
    assert all(i < cfg.num_steps for i in rollout.window)
    assert rollout.latents.shape == (2, cfg.window_size + 1 if cfg.window_size else 0, 1, 2, 2)
    assert rollout.log_probs.shape == (2, cfg.window_size)
    assert bool(torch.isfinite(rollout.log_probs).all())


def test_window_start_outside_the_range_is_refused() -> None:
    cfg = SamplerConfig(num_steps=6, window_size=2, window_lo=1, window_hi=4)
    for start in (0, 3, 5):
        with pytest.raises(ValueError, match=f"expected 1 <= window_start <= 2 .* got {start}"):
            sample(random_velocity_mlp(0), torch.zeros(1, dtype=torch.long), torch.zeros(1, 1, 4, 4), cfg, None, start)


def test_window_size_zero_is_the_ode_sampler_with_empty_log_probs() -> None:
    model = random_velocity_mlp(3)
    cfg = SamplerConfig(num_steps=5, shift=2.0, noise_level=0.0, window_size=0)
    noise, labels = torch.randn((3, 1, 4, 4), generator=torch.Generator().manual_seed(0)), torch.tensor([2, 0, 1])
    rollout = sample(model, labels, noise, cfg, None)
    assert rollout.log_probs.shape == (3, 0) and rollout.latents.shape == (3, 0, 1, 4, 4) and rollout.window == ()
    x, sigmas = noise.clone(), cfg.schedule.sigmas()
    with torch.no_grad():
        for i in range(cfg.num_steps):
            x = x + (sigmas[i + 1] - sigmas[i]) * model(x, sigmas[i].expand(3), labels)
    torch.testing.assert_close(rollout.images, x, rtol=0, atol=1e-6)
    assert float((rollout.images - noise).abs().max()) > 0.1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_steps": 0, "window_size": 0}, "expected num_steps >= 1 and shift > 0, got 0, 1.0"),
        ({"shift": 0.0}, "expected num_steps >= 1 and shift > 0, got 10, 0.0"),
        ({"window_size": -1}, "window_size: expected >= 0, got -1"),
        ({"num_steps": 4, "window_size": 2, "window_lo": 3, "window_hi": 5}, "window_lo, window_hi: expected 0 <= lo"),
        ({"num_steps": 4, "window_size": 3, "window_lo": 0, "window_hi": 2}, "window_lo, window_hi: expected 0 <= lo"),
        ({"num_steps": 4, "window_size": 1, "window_lo": -1, "window_hi": 2}, "window_lo, window_hi: expected 0 <= lo"),
        ({"noise_level": 0.0, "window_size": 2}, "noise_level: expected > 0 with an SDE window, got 0.0"),
        (
            {"sde_kind": "cps", "num_steps": 4, "window_lo": 0, "window_hi": 4},
            "a CPS window may not include the last step",
        ),
    ],
)
def test_invalid_sampler_config_values_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SamplerConfig(**kwargs)
