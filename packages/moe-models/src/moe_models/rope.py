"""Rotary position embedding (default rope type, no scaling), half-split layout as in Hugging Face."""

from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """Maps integer positions to (cos, signed_sin) tables of shape [..., head_dim].

    signed_sin is sin with its first half negated, so that rotate_half(x) * sin == roll(x, D/2) * signed_sin
    exactly (sign flips are exact in IEEE arithmetic).
    """

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # [head_dim / 2]

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: int64 [...]; returns cos, signed_sin of shape [..., head_dim] in `dtype`."""
        return rotary_tables(positions, self.inv_freq, dtype)


def rotary_tables(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """`RotaryEmbedding.forward` as a function of tensors: positions int64 [...], inv_freq [head_dim / 2] ->
    cos, signed_sin [..., head_dim] in `dtype`, computed in float32 (float64 for a float64 `dtype`)."""
    wide = torch.promote_types(dtype, torch.float32)
    freqs = positions[..., None].to(wide) * inv_freq.to(wide)
    emb = torch.cat((freqs, freqs), dim=-1)
    sin = emb.sin().to(dtype)
    half = sin.shape[-1] // 2
    signed_sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return emb.cos().to(dtype), signed_sin


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x: [..., heads, head_dim]; cos/signed_sin broadcast as [..., 1, head_dim].

    Equals x * cos + cat(-x2, x1) * sin with (x1, x2) the halves of x.
    """
    rolled = torch.roll(x, shifts=x.shape[-1] // 2, dims=-1)
    return x * cos.unsqueeze(-2) + rolled * signed_sin.unsqueeze(-2)
