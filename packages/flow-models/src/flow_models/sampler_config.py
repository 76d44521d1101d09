"""The `sampler` section: how a training rollout samples (standard library only: `--help` imports it and checks
the settings at parse time).

SDE kinds and log-prob reductions are defined here and used by `flow_models.sde`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from run_lifecycle.fields import help_field

if TYPE_CHECKING:
    import torch

    from flow_models.schedule import FlowSchedule

SdeKind = Literal["sde", "cps"]
Reduction = Literal["mean", "sum"]


@dataclass(frozen=True)
class SamplerConfig:
    """Training rollouts: ODE steps, with SDE (stochastic, trained) steps inside one window. The window lies in
    steps `[window_lo, window_hi)`; its start is drawn uniformly from `window_lo .. window_hi - window_size` per
    rollout batch (one window for the whole batch, so its steps batch together)."""

    num_steps: int = help_field("denoising steps of a training rollout", 10)
    shift: float = help_field(
        "time shift of the sigma schedule (diffusers' FlowMatchEulerDiscreteScheduler shift)", 1.0
    )
    noise_level: float = help_field("SDE noise level a (std_t = a sqrt(sigma / (1 - sigma)); CPS: sin(a pi / 2))", 0.7)
    sde_kind: SdeKind = field(
        default="sde", metadata={"help": "sde: Flow-GRPO's SDE; cps: coefficients-preserving sampling"}
    )
    window_size: int = help_field("stochastic (trained) steps per rollout", 2)
    window_lo: int = help_field("first step index the window may start at", 0)
    window_hi: int = help_field("the window lies in steps [window_lo, window_hi)", 5)
    reduction: Reduction = field(
        default="mean", metadata={"help": "per-step log-prob: mean (the reference's) or sum over latent elements"}
    )

    def __post_init__(self) -> None:
        if self.num_steps < 1 or not self.shift > 0:
            raise ValueError(f"sampler: expected num_steps >= 1 and shift > 0, got {self.num_steps}, {self.shift}")
        lo, hi = self.window_lo, self.window_hi
        if self.window_size < 0:
            raise ValueError(f"sampler.window_size: expected >= 0, got {self.window_size}")
        if self.window_size and not 0 <= lo <= hi - self.window_size <= self.num_steps - self.window_size:
            raise ValueError(
                f"sampler.window_lo, window_hi: expected 0 <= lo <= hi - window_size and hi <= num_steps "
                f"({self.num_steps}), got [{lo}, {hi}) with window_size {self.window_size}"
            )
        if self.window_size and not self.noise_level > 0:
            raise ValueError(f"sampler.noise_level: expected > 0 with an SDE window, got {self.noise_level}")
        if self.sde_kind == "cps" and self.window_size and hi >= self.num_steps:
            raise ValueError(
                "sampler.window_hi: a CPS window may not include the last step (its std is 0 there); expected "
                f"window_hi <= {self.num_steps - 1}, got {hi}"
            )

    @property
    def schedule(self) -> FlowSchedule:
        from flow_models.schedule import FlowSchedule

        return FlowSchedule(self.num_steps, self.shift)

    def draw_window_start(self, generator: torch.Generator) -> int:
        import torch

        top = self.window_hi - self.window_size + 1
        return int(torch.randint(self.window_lo, top, (1,), generator=generator).item())
