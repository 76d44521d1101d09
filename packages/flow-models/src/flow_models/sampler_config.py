"""SamplerConfig: how a training rollout samples (standard library only; `--help` builds it to check settings).

SDE kinds and log-prob reductions are defined here and used by `flow_models.sde`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from flow_models.schedule import FlowSchedule


class SdeKind(StrEnum):
    SDE = "sde"
    CPS = "cps"


class Reduction(StrEnum):
    MEAN = "mean"
    SUM = "sum"


@dataclass(frozen=True)
class SamplerConfig:
    """`window_range`: `[lo, hi)` step indices the window must lie in; its start is drawn uniformly from
    `lo .. hi - window_size` per rollout batch (one window for the whole batch, so its steps batch together)."""

    num_steps: int = 10
    shift: float = 1.0
    noise_level: float = 0.7
    kind: SdeKind = SdeKind.SDE
    window_size: int = 2
    window_range: tuple[int, int] = (0, 5)
    reduction: Reduction = Reduction.MEAN

    def __post_init__(self) -> None:
        if self.num_steps < 1 or not self.shift > 0:
            raise ValueError(f"sampler: expected num_steps >= 1 and shift > 0, got {self.num_steps}, {self.shift}")
        lo, hi = self.window_range
        if self.window_size < 0:
            raise ValueError(f"sampler.window_size: expected >= 0, got {self.window_size}")
        if self.window_size and not 0 <= lo <= hi - self.window_size <= self.num_steps - self.window_size:
            raise ValueError(
                f"sampler.window_range: expected 0 <= lo <= hi - window_size and hi <= num_steps ({self.num_steps}), "
                f"got {self.window_range} with window_size {self.window_size}"
            )
        if self.window_size and not self.noise_level > 0:
            raise ValueError(f"sampler.noise_level: expected > 0 with an SDE window, got {self.noise_level}")
        if self.kind is SdeKind.CPS and self.window_size and hi >= self.num_steps:
            raise ValueError(
                "sampler.window_range: a CPS window may not include the last step (its std is 0 "
                f"there); expected hi <= {self.num_steps - 1}, got {hi}"
            )

    @property
    def schedule(self) -> FlowSchedule:
        from flow_models.schedule import FlowSchedule

        return FlowSchedule(self.num_steps, self.shift)

    def draw_window_start(self, generator: torch.Generator) -> int:
        import torch

        lo, hi = self.window_range
        return int(torch.randint(lo, hi - self.window_size + 1, (1,), generator=generator).item())
