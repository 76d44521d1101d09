"""LossInputs -> LossOutputs: what an algorithm's loss reads for one micro-batch and what it returns.

Token tensors are `[b, t]` on the shifted grid of `TrainBatch` (entry `t` scores token `t + 1`), right-padded, on
the backend's device. Metric values are 0-dim tensors (never Python floats): the step turns every metric into a
float once, at its end, so a step costs no host synchronisation per micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class LossInputs:
    """One micro-batch. `num_tokens` / `num_seqs` are the *mini-batch's* loss-token and non-empty-sequence counts
    (summed over data-parallel ranks), so summing the micro-batch losses gives the mini-batch loss exactly."""

    log_probs: torch.Tensor  # [b, t] log pi_theta, the only input with a gradient
    old_log_probs: torch.Tensor  # [b, t] log pi_old (proximal): recomputed, or the rollout's in bypass mode
    rollout_log_probs: torch.Tensor  # [b, t] log mu, the behaviour policy that sampled the tokens
    advantages: torch.Tensor  # [b, t]
    mask: torch.Tensor  # [b, t] 1 on loss tokens
    num_tokens: float
    num_seqs: float
    ref_log_probs: torch.Tensor | None = None  # [b, t] the reference policy (KL) or a teacher (distillation)
    is_weights: torch.Tensor | None = None  # [b, t] rollout-correction weights, detached; None: all 1
    top_k_log_probs: torch.Tensor | None = None  # [b, t, K] log pi_theta of the teacher's top-k ids (with grad)
    teacher_top_k: tuple[torch.Tensor, torch.Tensor] | None = None  # ([b, t, K] teacher log-probs, [b, t, K] valid)


@dataclass
class LossOutputs:
    """`loss`: 0-dim, with global denominators. `means`: 0-dim per-micro-batch means over its loss tokens (the step
    combines them weighted by tokens); `sums`: 0-dim terms already scaled by the global denominators (summed over
    micro-batches, averaged over optimiser steps); `maxima`: 0-dim maxima (the step keeps the largest)."""

    loss: torch.Tensor
    means: dict[str, torch.Tensor] = field(default_factory=dict)
    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    maxima: dict[str, torch.Tensor] = field(default_factory=dict)

    def merged(self, other: LossOutputs) -> LossOutputs:
        """The sum of two losses (e.g. the policy loss and a KL term) with both sets of metrics."""
        return LossOutputs(
            self.loss + other.loss, self.means | other.means, self.sums | other.sums, self.maxima | other.maxima
        )
