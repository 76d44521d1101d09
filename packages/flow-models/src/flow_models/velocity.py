"""A small class-conditional velocity model for single-channel images (8x8 digits by default), in plain torch.

A pure model: `forward(x [b, c, h, w], sigma [b] float32 in [0, 1], labels [b] long) -> v [b, c, h, w]`, the
velocity `noise - x0` of `schedule`'s convention. The image is flattened and passed through residual MLP blocks;
each block is modulated (scale and shift) by an embedding of sigma (sinusoidal) and of the class. An MLP is the
fastest thing that learns 64-pixel digits on 2 CPU cores; larger images go through `diffusers_adapter`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from flow_models.velocity_config import VelocityConfig


def sigma_embedding(sigma: torch.Tensor, dim: int) -> torch.Tensor:
    """`[b] -> [b, dim]` sinusoidal features of `1000 * sigma` (periods from 1 to 10^4 timesteps)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, dtype=torch.float32, device=sigma.device) / half)
    angles = 1000.0 * sigma.float()[:, None] * freqs[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class ModulatedBlock(nn.Module):
    """`h + W2 silu(W1 (norm(h) * (1 + scale) + shift))`, scale and shift from the conditioning."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden, elementwise_affine=False)
        self.modulation = nn.Linear(hidden, 2 * hidden)
        self.fc1 = nn.Linear(hidden, 2 * hidden)
        self.fc2 = nn.Linear(2 * hidden, hidden)

    def forward(self, h: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.modulation(cond).chunk(2, dim=1)
        return h + self.fc2(torch.nn.functional.silu(self.fc1(self.norm(h) * (1 + scale) + shift)))


class VelocityMLP(nn.Module):
    def __init__(self, config: VelocityConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_in = nn.Linear(config.pixels, config.hidden)
        self.time = nn.Sequential(
            nn.Linear(config.time_dim, config.hidden), nn.SiLU(), nn.Linear(config.hidden, config.hidden)
        )
        self.label = nn.Embedding(config.num_classes, config.hidden)
        self.blocks = nn.ModuleList(ModulatedBlock(config.hidden) for _ in range(config.depth))
        self.norm_out = nn.LayerNorm(config.hidden)
        self.out = nn.Linear(config.hidden, config.pixels)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor, sigma: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        if sigma.shape != (b,) or labels.shape != (b,):
            raise ValueError(
                f"VelocityMLP: expected sigma and labels of shape ({b},), got {tuple(sigma.shape)} "
                f"and {tuple(labels.shape)}"
            )
        cond = torch.nn.functional.silu(self.time(sigma_embedding(sigma, self.config.time_dim)) + self.label(labels))
        h = self.embed_in(x.reshape(b, -1))  # [b, hidden]
        for block in self.blocks:
            h = block(h, cond)
        return self.out(self.norm_out(h)).reshape(x.shape)
