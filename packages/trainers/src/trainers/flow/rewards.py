"""RewardSpec: the run's reward, buildable in any process (a rollouter actor too) from numpy weights."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from flow_models.classifier import DigitClassifier
from flow_models.reward_config import ClassifierRewardConfig, InkRewardConfig, RewardConfig
from flow_models.rewards import RewardFn, ink_reward


@dataclass(frozen=True)
class RewardSpec:
    """`classifier`: the reward classifier's weights (always sent: validation reports its probability whatever
    the reward)."""

    config: RewardConfig
    classifier_hidden: int
    classifier: dict[str, np.ndarray]

    def build_classifier(self) -> DigitClassifier:
        model = DigitClassifier(self.classifier_hidden)
        model.load_state_dict({k: torch.tensor(v) for k, v in self.classifier.items()})  # copies: may be read-only
        return model.eval().requires_grad_(False)

    def build(self) -> RewardFn:
        if isinstance(self.config, ClassifierRewardConfig):
            return self.build_classifier().class_probability
        if isinstance(self.config, InkRewardConfig):
            return ink_reward(self.config.target)
        raise ValueError(f"reward.kind: expected classifier or ink, got {self.config!r}")
