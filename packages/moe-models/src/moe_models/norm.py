"""Root-mean-square layer norm (Qwen3 / T5 style)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps) over the last dim (weight: [x.shape[-1]]), statistics in float32 (in
    float64 for float64 input), output in x's dtype: the math of `RMSNorm`, as a function of tensors (for callers
    that hold the weight as an input rather than a module, such as a compiled graph)."""
    shape = (x.shape[-1],)
    stats = torch.promote_types(x.dtype, torch.float32)
    if x.dtype == stats and weight.dtype == stats:
        return F.rms_norm(x, shape, weight, eps)
    return weight * F.rms_norm(x.to(stats), shape, None, eps).to(x.dtype)


class RMSNorm(nn.Module):
    """y = weight * x / sqrt(mean(x^2) + eps), statistics in float32 (float64 for float64 input), output in the
    input dtype.

    For low-precision inputs the normalised value is cast back to the input dtype before the weight multiply,
    as Hugging Face does; in float32 the fused kernel computes the same values.
    """

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.variance_epsilon)
