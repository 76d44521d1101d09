"""Output records of `MoEForCausalLM.forward`: the logits (`CausalLMOutput`) or the head's scores of each next token
(`TokenScores`, `MoEForCausalLM.token_log_probs_at`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CausalLMOutput:
    """logits: [B, T, V] in the model dtype (None when the forward was asked for `scores` instead); routed_experts:
    [B, T, L_moe, K] int64 (the ids actually used, replayed or native), or None when routing was not captured;
    scores: `TokenScores` when asked for (`forward(score=...)`)."""

    logits: torch.Tensor
    routed_experts: torch.Tensor | None = None
    scores: TokenScores | None = None


@dataclass(frozen=True)
class TokenScores:
    """`MoEForCausalLM.token_log_probs_at`'s result, on the shifted grid (entry t scores token t + 1): log_probs
    `[B, T-1]` float32, at `[B, T-1, K]` or None, entropy `[B, T-1]` or None (zero until the backward pass fills
    it), routed_experts `[B, T, L_moe, K]` or None, top_ids `[B, T-1, k]` int64 and top_log_probs `[B, T-1, k]` or
    None."""

    log_probs: torch.Tensor
    at: torch.Tensor | None
    entropy: torch.Tensor | None
    routed_experts: torch.Tensor | None
    top_ids: torch.Tensor | None = None
    top_log_probs: torch.Tensor | None = None
