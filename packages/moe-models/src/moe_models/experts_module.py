"""ExpertsModule: what forward contexts and the batch-invariant ops read of `moe_models.moe.Experts` (a protocol, so
that neither imports the module that imports them)."""

from __future__ import annotations

from typing import Protocol

import torch


class ExpertsModule(Protocol):
    """`moe_models.moe.Experts`."""

    gate_up_proj: torch.Tensor
    down_proj: torch.Tensor
    gate_up_proj_bias: torch.Tensor | None
    down_proj_bias: torch.Tensor | None

    def activate(self, gate_up: torch.Tensor) -> torch.Tensor: ...

    def __call__(self, h: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor: ...
