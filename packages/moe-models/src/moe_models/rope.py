"""Rotary position embedding: default or YaRN-scaled frequencies, half-split or interleaved pairs."""

from __future__ import annotations

import math

import torch
from torch import nn

from moe_models.config import MoEConfig, YarnScaling


class RotaryEmbedding(nn.Module):
    """Maps integer positions to (cos, signed_sin) tables of shape [..., rotary_dim].

    signed_sin is sin with its first half negated, so that rotate_half(x) * sin == roll(x, D/2) * signed_sin
    exactly (sign flips are exact in IEEE arithmetic). With YaRN both tables are scaled by its attention factor.
    """

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        dim, theta = config.rotary_dim, config.rope_theta
        if config.rope_scaling is None:
            inv_freq, self.attention_factor = default_inv_freq(dim, theta), 1.0
        else:
            inv_freq, self.attention_factor = yarn_inv_freq(dim, theta, config.rope_scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # [rotary_dim / 2]

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: int64 [...]; returns cos, signed_sin of shape [..., rotary_dim] in `dtype`."""
        return rotary_tables(positions, self.inv_freq, dtype, self.attention_factor)


def default_inv_freq(dim: int, theta: float) -> torch.Tensor:
    """[dim / 2] float32: theta^(-2i / dim)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


def yarn_inv_freq(dim: int, theta: float, yarn: YarnScaling) -> tuple[torch.Tensor, float]:
    """YaRN (arXiv 2309.00071) as transformers computes it: frequencies blended between interpolated (divided by
    `factor`) and extrapolated (unchanged) by a linear ramp over the dims whose wavelengths fall between the
    `beta_fast` and `beta_slow` rotation counts of the original context; and the attention factor scaling cos/sin."""

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if yarn.attention_factor is not None:
        factor = yarn.attention_factor
    elif yarn.mscale and yarn.mscale_all_dim:
        factor = mscale(yarn.factor, yarn.mscale) / mscale(yarn.factor, yarn.mscale_all_dim)
    else:
        factor = mscale(yarn.factor)

    def correction_dim(rotations: float) -> float:
        length = yarn.original_max_position_embeddings
        return dim * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(yarn.beta_fast), correction_dim(yarn.beta_slow)
    if yarn.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a zero-width ramp would divide by zero
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    wavelengths = theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
    keep = 1 - ramp  # 1: extrapolate (high-frequency dims), 0: interpolate
    inv_freq = 1.0 / (yarn.factor * wavelengths) * (1 - keep) + 1.0 / wavelengths * keep
    return inv_freq, float(factor)


def rotary_tables(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype, attention_factor: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """`RotaryEmbedding.forward` as a function of tensors: positions int64 [...], inv_freq [rotary_dim / 2] ->
    cos, signed_sin [..., rotary_dim] in `dtype`, computed in float32 (float64 for a float64 `dtype`)."""
    wide = torch.promote_types(dtype, torch.float32)
    freqs = positions[..., None].to(wide) * inv_freq.to(wide)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    sin = sin.to(dtype)
    half = sin.shape[-1] // 2
    signed_sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos.to(dtype), signed_sin


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x: [..., heads, rotary_dim]; cos/signed_sin broadcast as [..., 1, rotary_dim].

    Equals x * cos + cat(-x2, x1) * sin with (x1, x2) the halves of x.
    """
    rolled = torch.roll(x, shifts=x.shape[-1] // 2, dims=-1)
    return x * cos.unsqueeze(-2) + rolled * signed_sin.unsqueeze(-2)


def apply_rotary_interleaved(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary on adjacent pairs (x0, x1), (x2, x3), ... (DeepSeek's `rope_interleave`), returned half-split as
    transformers does: [x_even * cos - x_odd * sin, x_odd * cos + x_even * sin] over the pair frequencies. Queries and
    keys get the same permutation, so their dot products are those of the interleaved layout."""
    half = x.shape[-1] // 2
    cos, sin = cos[..., None, :half], signed_sin[..., None, half:]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat([even * cos - odd * sin, odd * cos + even * sin], dim=-1)
