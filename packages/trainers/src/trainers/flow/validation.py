"""Validation: the deterministic ODE sampler from fixed noise (`validation.seed`) for every class, scored by the
run's reward and by the reward classifier (whatever the run's reward is). The images are kept for the grids.

Metrics: `val/reward/mean` (the run's reward), `val/class_prob/mean` (classifier probability of the requested
class), `val/class_acc` (fraction classified as requested), `val/ink/mean`, and `val/reward/class_<c>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from flow_models.classifier import DigitClassifier
from flow_models.digits import NUM_CLASSES
from flow_models.rewards import RewardFn, ink
from flow_models.sampler import VelocityFn, sample
from flow_models.sampler_config import SamplerConfig

from trainers.flow.validation_config import FlowValidationConfig


@dataclass(frozen=True)
class FlowValidationResult:
    step: int
    metrics: dict[str, float]
    labels: np.ndarray  # [C * n] int64, class-major: the first n images are class 0
    images: np.ndarray  # [C * n, 1, 8, 8] float32

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"images_{self.step}.npz"
        np.savez(path, labels=self.labels, images=self.images)
        return path

    @staticmethod
    def load_images(folder: Path, step: int) -> tuple[np.ndarray, np.ndarray]:
        with np.load(folder / f"images_{step}.npz") as data:
            return data["labels"], data["images"]


@torch.no_grad()
def validate(
    fn: VelocityFn,
    cfg: FlowValidationConfig,
    shift: float,
    reward: RewardFn,
    classifier: DigitClassifier,
    step: int,
    image_shape: tuple[int, ...],
) -> FlowValidationResult:
    n = cfg.samples_per_class
    labels = torch.arange(NUM_CLASSES).repeat_interleave(n)
    noise = torch.randn((len(labels), *image_shape), generator=torch.Generator().manual_seed(cfg.seed))
    ode = SamplerConfig(num_steps=cfg.num_steps, shift=shift, window_size=0)
    images = sample(fn, labels, noise, ode, None).images
    rewards = reward(images, labels)
    probs = torch.softmax(classifier(images.clamp(-1, 1)), dim=1)
    metrics = {
        "val/reward/mean": float(rewards.mean()),
        "val/class_prob/mean": float(probs.gather(1, labels[:, None]).mean()),
        "val/class_acc": float((probs.argmax(1) == labels).float().mean()),
        "val/ink/mean": float(ink(images).mean()),
    }
    for c in range(NUM_CLASSES):
        metrics[f"val/reward/class_{c}"] = float(rewards[c * n : (c + 1) * n].mean())
    return FlowValidationResult(step, metrics, labels.numpy(), images.numpy())
