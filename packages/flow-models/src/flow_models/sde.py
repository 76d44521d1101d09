"""One denoising step as a Gaussian policy: the flow-matching SDE (Flow-GRPO) and the coefficients-preserving
variant (CPS), with the log-density of the step's outcome.

All math runs in float32 whatever the model's dtype (bf16 overflows in `std^2 / sigma`). Shapes: `x`, `v`
`[b, ...]` latents; `sigma`, `sigma_next` python floats or 0-dim tensors with `1 >= sigma > sigma_next >= 0`.

SDE (noise level `a`): `std_t = a * sqrt(sigma / (1 - sigma))`; at sigma = 1 the denominator uses `sigma_max`,
the schedule's second sigma (the guarded endpoint: `1 - 1` would divide by zero). With `dt = sigma_next - sigma`:

    mean = x * (1 + std_t^2 * dt / (2 sigma)) + v * (1 + std_t^2 * (1 - sigma) / (2 sigma)) * dt
    x_next = mean + std_t * sqrt(-dt) * eps

and log p(x_next) is the Gaussian log-density with that mean and `std_t * sqrt(-dt)`. With `a = 0` the step is
the deterministic Euler (ODE) step `x + v * dt` and has no density.

CPS: `std = sigma_next * sin(a * pi / 2)`; the mean moves the predicted data and noise to `sigma_next` keeping
the coefficients' norm; its log-prob is the unnormalised `-(x_next - mean)^2` (as the reference does).

`reduction`: the per-element log-densities are averaged (`mean`, the reference's choice: exp of a difference is
then a geometric mean of per-element ratios, hence clip ranges near 1e-4) or summed (`sum`: the joint density).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from flow_models.sampler_config import Reduction, SdeKind


@dataclass(frozen=True)
class StepGaussian:
    """The distribution of `x_next` given `x`: `mean` `[b, ...]` float32, `std` a 0-dim float32 (0: deterministic)."""

    mean: torch.Tensor
    std: torch.Tensor
    kind: SdeKind

    def sample(self, noise: torch.Tensor) -> torch.Tensor:
        return self.mean + self.std * noise.float()

    def log_prob(self, x_next: torch.Tensor, reduction: Reduction) -> torch.Tensor:
        """`[b]` float32; `x_next` is treated as data (detached)."""
        if not float(self.std) > 0:
            raise ValueError(
                f"log_prob: the step is deterministic (std {float(self.std)}: noise_level 0, or CPS at "
                "sigma_next 0), it has no density; expected std > 0"
            )
        diff = x_next.detach().float() - self.mean
        if self.kind == "cps":
            per_element = -(diff**2)
        else:
            per_element = -(diff**2) / (2 * self.std**2) - torch.log(self.std) - 0.5 * math.log(2 * math.pi)
        flat = per_element.flatten(1)
        return flat.mean(dim=1) if reduction == "mean" else flat.sum(dim=1)


def _f32(value: float | torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(value, dtype=torch.float32)


def step_gaussian(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: float | torch.Tensor,
    sigma_next: float | torch.Tensor,
    noise_level: float,
    kind: SdeKind,
    sigma_max: float | torch.Tensor,
) -> StepGaussian:
    """The step from `sigma` to `sigma_next`; `sigma_max`: the schedule's largest sigma below 1 (`sigmas[1]`)."""
    s, s_next, s_max = _f32(sigma).to(x.device), _f32(sigma_next).to(x.device), _f32(sigma_max).to(x.device)
    if not float(s) > float(s_next):
        raise ValueError(f"step_gaussian: expected sigma > sigma_next, got {float(s)} and {float(s_next)}")
    if noise_level < 0:
        raise ValueError(f"step_gaussian: expected noise_level >= 0, got {noise_level}")
    x32, v32 = x.float(), v.float()
    dt = s_next - s
    if kind == "cps":
        std = s_next * math.sin(noise_level * math.pi / 2)
        x0_hat = x32 - s * v32
        noise_hat = x32 + (1 - s) * v32
        mean = x0_hat * (1 - s_next) + noise_hat * torch.sqrt(torch.clamp(s_next**2 - std**2, min=0.0))
        return StepGaussian(mean, std, kind)
    if noise_level == 0:
        return StepGaussian(x32 + v32 * dt, torch.zeros((), dtype=torch.float32, device=x.device), kind)
    denominator = 1 - torch.where(s >= 1, s_max, s)
    std_t = noise_level * torch.sqrt(s / denominator)
    mean = x32 * (1 + std_t**2 * dt / (2 * s)) + v32 * (1 + std_t**2 * (1 - s) / (2 * s)) * dt
    return StepGaussian(mean, std_t * torch.sqrt(-dt), kind)
