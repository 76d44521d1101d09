"""FlowRollouter: samples and scores one step's images with the weights it was last sent. The same class runs in
the driver's process or as a Ray actor; either way its calls run one at a time, in the order they were made
(`async_pipeline.transport`: `LocalRollouts` or `RayRollouts` build it from its spec), so what step s trains depends
only on the settings, never on timing.

A step's draws (classes, initial noise, window start, window noise) come from a generator seeded by `(seed,
step)`: a batch is a pure function of the weights that sampled it and its step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from flow_models.digits import NUM_CLASSES
from flow_models.rewards import RewardFn
from flow_models.sampler import sample
from flow_models.sampler_config import SamplerConfig
from flow_models.velocity import VelocityMLP
from flow_models.velocity_config import VelocityConfig
from trainers.flow.batch import RolloutBatch
from trainers.flow.rewards import RewardSpec
from trainers.weight_sync import WeightHandle, WeightSync


def step_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, step]).generate_state(1)[0]))


@dataclass(frozen=True)
class FlowRollouterSpec:
    """Everything a rollouter builds itself from (numpy weights: cheap through Ray's object store)."""

    model: VelocityConfig
    weights: dict[str, np.ndarray]
    sampler: SamplerConfig
    prompts_per_step: int
    samples_per_prompt: int
    reward: RewardSpec
    seed: int
    torch_threads: int

    def build(self, sync: WeightSync) -> FlowRollouter:
        return FlowRollouter(self, sync)


class FlowRollouter:
    def __init__(self, spec: FlowRollouterSpec, sync: WeightSync) -> None:
        torch.set_num_threads(spec.torch_threads)
        self.spec = spec
        self.sync = sync
        self.model = VelocityMLP(spec.model).eval().requires_grad_(False)
        self.model.load_state_dict(
            {k: torch.tensor(v) for k, v in spec.weights.items()}
        )  # copies: Ray's arrays are read-only
        self.reward: RewardFn = spec.reward.build()
        self.version = 0

    def set_weights(self, handle: WeightHandle) -> int:
        self.model.load_state_dict(self.sync.fetch(handle))
        self.version = handle.version
        return self.version

    def generate(self, step: int) -> RolloutBatch:
        t0 = time.perf_counter()
        s = self.spec
        gen = step_generator(s.seed, step)
        prompts = torch.randint(0, NUM_CLASSES, (s.prompts_per_step,), generator=gen)
        labels = prompts.repeat_interleave(s.samples_per_prompt)
        groups = np.repeat(np.arange(s.prompts_per_step, dtype=np.int64), s.samples_per_prompt)
        noise = torch.randn((len(labels), s.model.channels, s.model.image_size, s.model.image_size), generator=gen)
        start = s.sampler.draw_window_start(gen) if s.sampler.window_size else 0
        rollout = sample(self.model, labels, noise, s.sampler, gen, start)
        rewards = self.reward(rollout.images, labels)
        return RolloutBatch.of(step, self.version, rollout, groups, rewards, time.perf_counter() - t0)
