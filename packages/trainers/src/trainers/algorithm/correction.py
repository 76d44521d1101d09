"""The `algorithm.correction` section: off-policy correction of the rollout's behaviour log-probs, consumed as it is
by `trainers.rollout_correction`. Standard library only (`--help` imports it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from run_lifecycle.fields import help_field

IsLevel = Literal["token", "sequence"]


def _band(name: str, band: tuple[float, ...]) -> None:
    if band and (len(band) != 2 or not 0 <= band[0] < band[1]):
        raise ValueError(f"{name}: expected empty (off) or two ratios lo,hi with 0 <= lo < hi, got {band}")


@dataclass
class CorrectionConfig:
    """Off-policy correction between the trainer's log-probs and the rollout engine's (behaviour) ones, consumed
    as it is by `trainers.rollout_correction`: importance weights per token or per sequence (`is_level`; none:
    weights 1), truncated at `is_cap` (TIS) or zeroed outside `is_band` (IcePop), and rejection of tokens or
    sequences whose ratio leaves a band. A band is `(lo, hi)` with `0 <= lo < hi`, or empty (off); `is_cap` 0 is
    off. Every filter set must pass; everything off: no correction (`enabled` False)."""

    is_level: IsLevel | None = field(
        default=None, metadata={"help": "importance weights per token or per sequence (none: off)"}
    )
    is_cap: float = help_field("TIS: truncate the weights at this cap (0: no cap)", 0.0)
    is_band: tuple[float, ...] = help_field("IcePop: lo,hi; weights outside [lo, hi] become 0 (empty: off)", ())
    reject_token: tuple[float, ...] = help_field("lo,hi: tokens whose ratio leaves [lo, hi] leave the loss", ())
    reject_seq_sum: tuple[float, ...] = help_field(
        "lo,hi on exp(sum of log-ratios): whole sequences leave the loss", ()
    )
    reject_seq_mean: tuple[float, ...] = help_field("lo,hi on exp(mean log-ratio): whole sequences leave the loss", ())

    def __post_init__(self) -> None:
        for name in ("is_band", "reject_token", "reject_seq_sum", "reject_seq_mean"):
            _band(f"algorithm.correction.{name}", getattr(self, name))
        if self.is_cap < 0:
            raise ValueError(f"algorithm.correction.is_cap: expected >= 0 (0: off), got {self.is_cap}")
        if self.is_cap and self.is_band:
            raise ValueError("algorithm.correction: expected at most one of is_cap (TIS) and is_band (IcePop)")
        if (self.is_cap or self.is_band) and self.is_level is None:
            raise ValueError("algorithm.correction: is_cap / is_band need is_level token or sequence, got none")

    @property
    def enabled(self) -> bool:
        return self.is_level is not None or bool(self.reject_token or self.reject_seq_sum or self.reject_seq_mean)
