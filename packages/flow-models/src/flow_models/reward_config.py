"""The `reward` section: which reward a FlowGRPO run optimises (standard library only: `--help` imports it).
What each kind computes is in `flow_models.rewards`; `ClassifierConfig` is the reward classifier's training, which the
`classifier` kind is (with its `kind` tag) and every run validates with."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from run_lifecycle.fields import help_field


@dataclass(frozen=True)
class ClassifierConfig:
    """The reward classifier (an MLP trained once on the digits and cached, keyed by these settings)."""

    hidden: int = help_field(
        "hidden width of the reward classifier (an MLP, trained once on the digits and cached)", 256
    )
    steps: int = help_field("optimiser steps of the reward classifier's training", 1500)
    batch_size: int = help_field("batch size of the reward classifier's training", 128)
    lr: float = help_field("learning rate of the reward classifier's training", 2e-3)
    noise_std: float = help_field(
        "std of the Gaussian pixel noise added while the classifier trains, so near-digits are judged smoothly", 0.1
    )
    seed: int = help_field("seed of the reward classifier's training", 0)

    def __post_init__(self) -> None:
        if self.hidden < 1 or self.steps < 1 or self.batch_size < 1 or not self.lr > 0 or self.noise_std < 0:
            raise ValueError(
                f"reward: expected hidden, steps, batch_size >= 1, lr > 0 and noise_std >= 0, got {asdict(self)}"
            )


@dataclass(frozen=True)
class ClassifierRewardConfig(ClassifierConfig):
    kind: Literal["classifier"] = "classifier"


@dataclass(frozen=True)
class InkRewardConfig:
    kind: Literal["ink"] = "ink"
    target: float = help_field("target mean pixel intensity in (0, 1) (the digits average about 0.3)", 0.45)

    def __post_init__(self) -> None:
        if not 0 < self.target < 1:
            raise ValueError(f"reward.target: expected a fraction in (0, 1), got {self.target}")


RewardConfig = ClassifierRewardConfig | InkRewardConfig
