"""The `reward` section: which reward a FlowGRPO run optimises (standard library only: `--help` imports it).
What each kind computes is in `flow_models.rewards`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


def _help(text: str, default: object) -> object:
    return field(default=default, metadata={"help": text})


@dataclass(frozen=True)
class ClassifierRewardConfig:
    kind: Literal["classifier"] = "classifier"
    hidden: int = _help("hidden width of the reward classifier (an MLP, trained once on the digits and cached)", 256)
    steps: int = _help("optimiser steps of the reward classifier's training", 1500)
    seed: int = _help("seed of the reward classifier's training", 0)

    def __post_init__(self) -> None:
        if self.hidden < 1 or self.steps < 1:
            raise ValueError(f"reward: expected hidden >= 1 and steps >= 1, got {self.hidden}, {self.steps}")


@dataclass(frozen=True)
class InkRewardConfig:
    kind: Literal["ink"] = "ink"
    target: float = _help("target mean pixel intensity in (0, 1) (the digits average about 0.3)", 0.45)

    def __post_init__(self) -> None:
        if not 0 < self.target < 1:
            raise ValueError(f"reward.target: expected a fraction in (0, 1), got {self.target}")


RewardConfig = ClassifierRewardConfig | InkRewardConfig
