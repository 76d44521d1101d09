"""The `optim` section: AdamW with a global grad-norm clip, a linear ramp and a constant or cosine schedule. Standard
library only (`--help` imports it); every backend builds its own optimiser from it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from run_lifecycle.fields import help_field


@dataclass
class OptimConfig:
    """AdamW with a global grad-norm clip and an optional linear learning-rate ramp; every backend builds its own
    optimiser from this (and sets `lr_at(n)` before its optimiser step n)."""

    lr: float = help_field("AdamW learning rate (after the ramp)", 1e-4)
    lr_warmup_steps: int = help_field(
        "optimiser steps of a linear ramp to lr (step n, from 0, uses lr * (n + 1) / lr_warmup_steps); 0: no ramp", 0
    )
    schedule: Literal["constant", "cosine"] = help_field(
        "after the ramp: constant, or a cosine decay to min_lr_ratio x lr at the run's last optimiser step "
        "(run.steps x train.mini_batches_per_step x train.ppo_epochs)",
        "constant",
    )
    min_lr_ratio: float = help_field("cosine: the learning rate at the last step, as a fraction of lr", 0.0)
    beta1: float = help_field("AdamW beta1", 0.9)
    beta2: float = help_field("AdamW beta2", 0.999)
    weight_decay: float = help_field("AdamW decoupled weight decay", 0.0)
    grad_clip: float = help_field("max global grad norm (L2) per optimiser step", 1.0)
    kernel: Literal["auto", "foreach", "fused"] = help_field(
        "AdamW's kernel: fused (one kernel a tensor: ~10x faster on a 315M-parameter model on a CPU) or foreach "
        "(the two round differently); auto: fused from 10M parameters on (unless they are sharded), foreach below",
        "auto",
    )

    def __post_init__(self) -> None:
        if not self.lr > 0 or not self.grad_clip > 0:
            raise ValueError(f"optim: expected lr > 0 and grad_clip > 0, got {self.lr}, {self.grad_clip}")
        if self.kernel not in ("auto", "foreach", "fused"):
            raise ValueError(f"optim.kernel: expected auto, foreach or fused, got {self.kernel!r}")
        ramp = self.lr_warmup_steps
        if isinstance(ramp, bool) or not isinstance(ramp, int) or ramp < 0:
            raise ValueError(f"optim.lr_warmup_steps: expected an int >= 0, got {self.lr_warmup_steps!r}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"optim.min_lr_ratio: expected a fraction in [0, 1], got {self.min_lr_ratio}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1) or self.weight_decay < 0:
            raise ValueError(
                f"optim: expected beta1, beta2 in [0, 1) and weight_decay >= 0, got {self.beta1}, {self.beta2}, "
                f"{self.weight_decay}"
            )

    def lr_at(self, step: int, total_steps: int | None = None) -> float:
        """The learning rate of optimiser step `step` (0-based, counted over the whole run, resumes included);
        `total_steps`, the run's optimiser steps, is needed by the cosine schedule (steps past it keep its end)."""
        if step < 0:
            raise ValueError(f"OptimConfig.lr_at: expected a step >= 0, got {step}")
        if self.lr_warmup_steps and step < self.lr_warmup_steps:
            return self.lr * (step + 1) / self.lr_warmup_steps
        if self.schedule == "constant":
            return self.lr
        if total_steps is None or total_steps < 1:
            raise ValueError(f"optim.schedule cosine: expected the run's optimiser steps (>= 1), got {total_steps}")
        span = max(1, total_steps - 1 - self.lr_warmup_steps)
        done = min(1.0, (step - self.lr_warmup_steps) / span)
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * done)))
