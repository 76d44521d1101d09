"""Output record of `MoEForCausalLM.forward`."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CausalLMOutput:
    """logits: [B, T, V] in the model dtype; routed_experts: [B, T, L_moe, K] int64 (the ids actually used,
    replayed or native), or None when routing was not captured."""

    logits: torch.Tensor
    routed_experts: torch.Tensor | None = None
