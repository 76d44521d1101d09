"""FlowBase: what every FlowGRPO run on the digits starts from: the data, the warmed-up base model and the reward
classifier, both cached under `cache` (keyed by their settings, so a changed setting trains a new one).

The digits fix the model's image shape and classes; validation always reports the classifier's judgement, so the
classifier is built whatever the run's reward is (the default classifier's settings when the reward is another kind).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flow_models.base_cache import ensure_base, ensure_classifier
from flow_models.classifier import DigitClassifier
from flow_models.digits import IMAGE_SIZE, NUM_CLASSES, load_digit_splits
from flow_models.reward_config import ClassifierConfig, ClassifierRewardConfig, RewardConfig
from flow_models.velocity import VelocityMLP
from flow_models.velocity_config import VelocityConfig
from flow_models.warmup_config import FlowWarmupConfig

from trainers.flow.rewards import RewardSpec


def classifier_config(reward: RewardConfig) -> ClassifierConfig:
    """The reward's classifier (its section is one), or the default classifier when the reward is another kind."""
    return reward if isinstance(reward, ClassifierRewardConfig) else ClassifierConfig()


def fit_digits(model: VelocityConfig) -> VelocityConfig:
    """`model` when its image shape and classes are the digits' (else ValueError: the data fix them)."""
    shape = (model.image_size, model.channels, model.num_classes)
    if shape != (IMAGE_SIZE, 1, NUM_CLASSES):
        raise ValueError(
            f"model.image_size, channels, num_classes: expected {IMAGE_SIZE}, 1, {NUM_CLASSES} (the digits'), got "
            f"{', '.join(map(str, shape))}"
        )
    return model


@dataclass(frozen=True)
class FlowBase:
    model_cfg: VelocityConfig
    model: VelocityMLP  # the warmed-up base: the trainer's start and the rollouter's first weights
    classifier: DigitClassifier
    classifier_val_acc: float  # on the digits' validation split
    reward: RewardSpec

    @classmethod
    def prepare(cls, model: VelocityConfig, warmup: FlowWarmupConfig, reward: RewardConfig, cache: Path) -> FlowBase:
        data = load_digit_splits()
        clf_cfg = classifier_config(reward)
        classifier, clf_acc = ensure_classifier(clf_cfg, data, cache)
        model_cfg = fit_digits(model)
        base = ensure_base(model_cfg, warmup, data, cache)
        spec = RewardSpec(reward, clf_cfg.hidden, {k: v.numpy() for k, v in classifier.state_dict().items()})
        return cls(model_cfg, base, classifier, clf_acc, spec)

    def weights(self) -> dict[str, np.ndarray]:
        """The base's weights as numpy arrays (cheap through Ray's object store)."""
        return {k: v.numpy() for k, v in self.model.state_dict().items()}
