"""The step transport in this process: a rollouter's calls run in the order they were made, whatever the batch type
(the Ray transport is compared with this one by tests/flow_grpo)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from async_pipeline.transport import LocalRollouts
from trainers.weight_sync import WeightHandle, WeightSync


@dataclass(frozen=True)
class Drawn:
    """A toy batch: the step it was drawn for and the weights (version and value) it was drawn with."""

    step: int
    version: int
    value: float


class ToyRollouter:
    def __init__(self, sync: WeightSync) -> None:
        self.sync, self.version, self.value = sync, 0, 0.0

    def set_weights(self, handle: WeightHandle) -> int:
        self.value = float(self.sync.fetch(handle)["w"])
        self.version = handle.version
        return self.version

    def generate(self, step: int) -> Drawn:
        return Drawn(step, self.version, self.value)


@dataclass(frozen=True)
class ToySpec:
    def build(self, sync: WeightSync) -> ToyRollouter:
        return ToyRollouter(sync)


def test_each_batch_is_drawn_with_the_weights_pushed_before_it_was_submitted() -> None:
    rollouts = LocalRollouts(ToySpec())
    rollouts.submit(1)
    rollouts.push(rollouts.publish({"w": torch.tensor(2.0)}, 1))
    rollouts.submit(2)
    rollouts.submit(3)
    rollouts.push(rollouts.publish({"w": torch.tensor(3.0)}, 2))
    assert rollouts.take(1)[0] == Drawn(1, 0, 0.0)
    assert rollouts.take(2)[0] == Drawn(2, 1, 2.0)
    assert rollouts.take(3)[0] == Drawn(3, 1, 2.0)  # the push after it was submitted comes after it


def test_taking_a_step_out_of_order_or_never_submitted_is_an_error() -> None:
    rollouts = LocalRollouts(ToySpec())
    rollouts.submit(2)
    with pytest.raises(RuntimeError, match=r"take\(1\): the next submitted step is 2; expected 1"):
        rollouts.take(1)
    with pytest.raises(RuntimeError, match=r"take\(3\): expected the step to be submitted, got nothing queued"):
        rollouts.take(3)
