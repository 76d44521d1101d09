"""Root-mean-square layer norm (Qwen3 / T5 style)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, weight_first: bool = False) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps) over the last dim (weight: [x.shape[-1]]), statistics in float32 (in
    float64 for float64 input), output in x's dtype: the math of `RMSNorm`, as a function of tensors (for callers
    that hold the weight as an input rather than a module, such as a compiled graph). For a low-precision x the
    normalised value is cast back before the weight multiply, or after it with `weight_first` (GPT-OSS)."""
    shape = (x.shape[-1],)
    stats = torch.promote_types(x.dtype, torch.float32)
    if x.dtype == stats and weight.dtype == stats:
        return F.rms_norm(x, shape, weight, eps)
    normed = F.rms_norm(x.to(stats), shape, None, eps)
    if weight_first:
        return (weight.to(stats) * normed).to(x.dtype)
    return weight * normed.to(x.dtype)


class RMSNorm(nn.Module):
    """y = weight * x / sqrt(mean(x^2) + eps), statistics in float32 (float64 for float64 input), output in the
    input dtype.

    For low-precision inputs the normalised value is cast back to the input dtype before the weight multiply, as
    Hugging Face's Qwen, Mixtral and DeepSeek norms do (`weight_first`: after it, as GPT-OSS's does); in float32 the
    fused kernel computes the same values.
    """

    def __init__(self, size: int, eps: float, weight_first: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps
        self.weight_first = weight_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.variance_epsilon, self.weight_first)
