"""The flow-matching noise schedule: sigmas from 1 (pure noise) down to 0 (data), with a time shift.

Convention (the one diffusers' SD3 pipelines use): `x_sigma = (1 - sigma) * x0 + sigma * noise`, and a model
predicts the velocity `v = noise - x0` = dx/dsigma, so an Euler step is `x + (sigma_next - sigma) * v`.

`FlowSchedule.sigmas()` reproduces `diffusers.FlowMatchEulerDiscreteScheduler(shift=s).set_timesteps(n).sigmas`
exactly (no dynamic shifting): the training grid `k / N` for k = N..1 is shifted, the inference grid runs linearly
from the shifted maximum (1) to the shifted minimum `shift(1/N)`, and is then shifted again (diffusers applies the
shift twice at the low end; we keep its numbers so that a model trained with diffusers samples identically here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def shift_sigmas(sigmas: np.ndarray, shift: float) -> np.ndarray:
    """`shift * s / (1 + (shift - 1) * s)`: shift > 1 spends more steps at high noise."""
    return shift * sigmas / (1.0 + (shift - 1.0) * sigmas)


@dataclass(frozen=True)
class FlowSchedule:
    """`num_steps` denoising steps; `sigmas()` has `num_steps + 1` entries, the last exactly 0."""

    num_steps: int
    shift: float = 1.0
    num_train_timesteps: int = 1000

    def __post_init__(self) -> None:
        if self.num_steps < 1:
            raise ValueError(f"FlowSchedule.num_steps: expected >= 1, got {self.num_steps}")
        if not self.shift > 0:
            raise ValueError(f"FlowSchedule.shift: expected > 0, got {self.shift}")
        if self.num_train_timesteps < 2:
            raise ValueError(f"FlowSchedule.num_train_timesteps: expected >= 2, got {self.num_train_timesteps}")

    def sigmas(self) -> torch.Tensor:
        """float32 `[num_steps + 1]`, strictly decreasing from 1.0 to 0.0."""
        n_train = self.num_train_timesteps
        sigma_min = float(shift_sigmas(np.array([1.0 / n_train], dtype=np.float32), self.shift)[0])
        timesteps = np.linspace(1.0 * n_train, sigma_min * n_train, self.num_steps)
        sigmas = shift_sigmas(timesteps / n_train, self.shift).astype(np.float32)
        return torch.from_numpy(np.append(sigmas, np.float32(0.0)))

    def timesteps(self) -> torch.Tensor:
        """float32 `[num_steps]`: `sigma * num_train_timesteps`, what diffusers transformers take as `timestep`."""
        return self.sigmas()[:-1] * self.num_train_timesteps
