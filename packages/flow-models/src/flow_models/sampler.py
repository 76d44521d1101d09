"""The sampler: ODE steps everywhere, SDE steps (with stored log-probs) inside one window of consecutive steps.

A velocity function is `(x [b, ...], sigma [b] float32, labels [b] long) -> v [b, ...]`: our `VelocityMLP`, or a
diffusers transformer through `diffusers_adapter.SD3Velocity`. Conditioning is a class label in both (the adapter
maps labels to prompt embeddings).

Only the window's steps are stochastic and stored: `FlowRollout.latents[:, k]` is the state entering window step
`k` and `latents[:, k + 1]` the state it produced, so the training recompute of step `k` is one velocity forward
on exactly the inputs the rollout saw (`window_log_prob`). With `window_size = 0` (validation) the whole chain is
the deterministic ODE sampler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from flow_models.sampler_config import SamplerConfig, SdeKind
from flow_models.sde import StepGaussian, step_gaussian

VelocityFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class FlowRollout:
    """One batch of samples. `latents` `[b, W + 1, ...]` float32, `log_probs` `[b, W]` float32 (the sampler's, which
    the trainer takes as the old policy), `window` the W step indices, `images` `[b, ...]` the final samples."""

    labels: torch.Tensor
    sigmas: torch.Tensor
    window: tuple[int, ...]
    latents: torch.Tensor
    log_probs: torch.Tensor
    images: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def select(self, rows: torch.Tensor | list[int]) -> FlowRollout:
        index = torch.as_tensor(rows, dtype=torch.long)
        return FlowRollout(
            self.labels[index], self.sigmas, self.window, self.latents[index], self.log_probs[index], self.images[index]
        )


def _step(
    fn: VelocityFn,
    x: torch.Tensor,
    labels: torch.Tensor,
    sigmas: torch.Tensor,
    i: int,
    noise_level: float,
    kind: SdeKind,
) -> StepGaussian:
    sigma = sigmas[i].expand(x.shape[0]).to(x.device)
    v = fn(x, sigma, labels)
    return step_gaussian(x, v, sigmas[i], sigmas[i + 1], noise_level, kind, sigma_max=sigmas[1])


@torch.no_grad()
def sample(
    fn: VelocityFn,
    labels: torch.Tensor,
    initial_noise: torch.Tensor,
    cfg: SamplerConfig,
    generator: torch.Generator | None,
    window_start: int = 0,
) -> FlowRollout:
    """Runs the chain from `initial_noise` (`[b, ...]`, sigma = 1); the window's noise comes from `generator`."""
    lo, hi = cfg.window_lo, cfg.window_hi
    if cfg.window_size and not lo <= window_start <= hi - cfg.window_size:
        raise ValueError(
            f"sample.window_start: expected {lo} <= window_start <= {hi - cfg.window_size} (window [{lo}, {hi}), "
            f"window_size {cfg.window_size}), got {window_start}"
        )
    sigmas = cfg.schedule.sigmas()
    window = tuple(range(window_start, window_start + cfg.window_size))
    x = initial_noise.float()
    stored, log_probs = [], []
    for i in range(cfg.num_steps):
        in_window = i in window
        gaussian = _step(fn, x, labels, sigmas, i, cfg.noise_level if in_window else 0.0, cfg.sde_kind)
        if not in_window:
            x = gaussian.mean
            continue
        stored.append(x)
        noise = torch.randn(x.shape, generator=generator, dtype=torch.float32).to(x.device)
        x = gaussian.sample(noise)
        log_probs.append(gaussian.log_prob(x, cfg.reduction))
        if i == window[-1]:
            stored.append(x)
    b = x.shape[0]
    latents = torch.stack(stored, dim=1) if stored else x.new_zeros((b, 0, *x.shape[1:]))
    lp = torch.stack(log_probs, dim=1) if log_probs else x.new_zeros((b, 0))
    return FlowRollout(labels, sigmas, window, latents, lp, x)


def window_log_prob(
    fn: VelocityFn, rollout: FlowRollout, k: int, cfg: SamplerConfig
) -> tuple[torch.Tensor, StepGaussian]:
    """Window step `k`'s `[b]` log-probs of the stored outcome under `fn` (with gradient when `fn` has one) and its
    Gaussian (whose mean a KL term compares)."""
    i = rollout.window[k]
    gaussian = _step(fn, rollout.latents[:, k], rollout.labels, rollout.sigmas, i, cfg.noise_level, cfg.sde_kind)
    return gaussian.log_prob(rollout.latents[:, k + 1], cfg.reduction), gaussian
