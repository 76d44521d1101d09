"""Rewards of a sample given its requested class, each `(images [b, 1, 8, 8] in [-1, 1], labels [b]) -> [b]`
float32 in [0, 1]. Two kinds show that rewards plug in:

- `classifier`: the cached digit classifier's probability of the requested class (prompt following);
- `ink`: how close the image's ink (mean pixel intensity in [0, 1]) is to a target, `1 - |ink - target| /
  max(target, 1 - target)` (a pixel statistic: bolder or thinner strokes, whatever the class).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from flow_models.digits import to_unit

RewardFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def ink(images: torch.Tensor) -> torch.Tensor:
    """`[b]` mean pixel intensity in [0, 1]."""
    return to_unit(images.float()).flatten(1).mean(dim=1)


def ink_reward(target: float) -> RewardFn:
    scale = max(target, 1 - target)

    def reward(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return (1 - (ink(images) - target).abs() / scale).clamp(0, 1)

    return reward
