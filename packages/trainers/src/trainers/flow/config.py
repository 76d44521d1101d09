"""The `algorithm` section of FlowGRPO. Standard library only (`--help` imports it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from run_lifecycle.fields import help_field

CLIP_EPS_FOR_MEAN = 1e-4  # the reference's clip range, meaningful for a per-element *mean* log-prob
CLIP_EPS_FOR_SUM = 0.2  # a joint (summed) log-prob is an ordinary likelihood ratio: the usual PPO range


@dataclass
class FlowGRPOConfig:
    """Advantage: `A = (r - mean_group) / (std + eps)`, rewards per sample (never repeated over time steps); the
    std is over the whole batch (`global`) or the sample's group (`group`), with `ddof`. Loss per trained step:
    `mean_b max(-A r, -A clip(r, 1 - clip_eps, 1 + clip_eps))`, `A` clamped to `+-adv_clip_max` first."""

    kind: Literal["flow_grpo"] = "flow_grpo"
    std_mode: Literal["global", "group"] = help_field(
        "advantage std over the whole batch (global, the reference's choice) or per group (group)", "global"
    )
    ddof: int = help_field("delta degrees of freedom of that std (0: population, 1: unbiased)", 0)
    std_eps: float = help_field("added to the std before dividing", 1e-4)
    normalize_by_std: bool = help_field("divide by the std (false: A = r - group mean)", True)
    adv_clip_max: float = help_field("advantages are clamped to [-adv_clip_max, adv_clip_max]", 5.0)
    clip_eps: float | None = help_field(
        "PPO clip range of the per-step ratio (none: 1e-4 with sampler.reduction mean, 0.2 with sum)", None
    )
    beta: float = help_field(
        "KL-to-reference coefficient; the KL is the per-element Gaussian KL of the step's mean, "
        "(mu - mu_ref)^2 / (2 std^2), reduced like the log-prob (0: no reference model)",
        0.0,
    )
    old_policy: Literal["trainer", "rollout"] = help_field(
        "the PPO ratio's denominator for a stale batch (sampled by older weights than the trainer's): trainer "
        "(recomputed under the weights before the update, with the truncated behaviour weight below) or rollout "
        "(the sampler's own log-probs); a fresh batch always uses the rollout's, which the recompute equals",
        "trainer",
    )
    behaviour_weight_cap: float = help_field(
        "old_policy trainer: a stale sample's loss is weighted by min(exp(logp_trainer - logp_rollout), cap)",
        2.0,
    )
    drop_zero_advantage: bool = help_field(
        "train only samples with a non-zero advantage (the reference's filter), topped up with random zero-advantage "
        "samples so the count stays divisible by the mini-batches",
        False,
    )

    def __post_init__(self) -> None:
        if self.ddof not in (0, 1):
            raise ValueError(f"algorithm.ddof: expected 0 or 1, got {self.ddof}")
        if not self.std_eps >= 0 or not self.adv_clip_max > 0 or not self.beta >= 0:
            raise ValueError(
                f"algorithm: expected std_eps >= 0, adv_clip_max > 0, beta >= 0, got {self.std_eps}, "
                f"{self.adv_clip_max}, {self.beta}"
            )
        if not self.behaviour_weight_cap > 0:
            raise ValueError(f"algorithm.behaviour_weight_cap: expected > 0, got {self.behaviour_weight_cap}")
        if self.clip_eps is not None and not 0 < self.clip_eps < 1:
            raise ValueError(f"algorithm.clip_eps: expected none or in (0, 1), got {self.clip_eps}")

    def clip_range(self, reduction: str) -> float:
        """The clip epsilon for a log-prob `reduction` (mean | sum)."""
        if self.clip_eps is not None:
            return self.clip_eps
        if reduction not in ("mean", "sum"):
            raise ValueError(f"clip_range: expected reduction mean or sum, got {reduction!r}")
        return CLIP_EPS_FOR_MEAN if reduction == "mean" else CLIP_EPS_FOR_SUM


@dataclass
class FlowTrainConfig:
    """Mini-batches are optimiser steps; micro-batches only bound memory (pure gradient accumulation)."""

    mini_batches_per_step: int = help_field("optimiser steps per update (the batch is split evenly)", 1)
    micro_batch_size: int = help_field("samples per forward/backward", 64)
    epochs: int = help_field("passes over the batch per update", 1)

    def __post_init__(self) -> None:
        for name in ("mini_batches_per_step", "micro_batch_size", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name}: expected >= 1, got {getattr(self, name)}")
