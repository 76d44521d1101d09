"""The sections of a FlowGRPO run but Ray's (standard library and config modules only, so `--help` is instant): the
run, the velocity model (`flow_models.velocity_config`), its warm-up (`flow_models.warmup_config`), the rewards
(`flow_models.reward_config`), the rollout and the sampler (`flow_models.sampler_config`), the algorithm and the
training loop (`trainers.flow.config`), the optimiser (`trainers.backend.config`), the validation
(`trainers.flow.validation_config`) and the pipeline. `apps/flow_grpo` adds the `ray` section.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flow_models.reward_config import ClassifierRewardConfig, RewardConfig
from flow_models.sampler_config import SamplerConfig
from flow_models.velocity_config import VelocityConfig
from flow_models.warmup_config import FlowWarmupConfig
from run_lifecycle.fields import help_field
from run_lifecycle.run_section import RunConfig

from trainers.backend.config import OptimConfig
from trainers.flow.config import FlowGRPOConfig, FlowTrainConfig
from trainers.flow.validation_config import FlowValidationConfig


@dataclass
class FlowRunConfig(RunConfig):
    steps: int = help_field("training steps (prompts_per_step x samples_per_prompt images each)", 150)
    checkpoint_every: int = help_field(
        "save a checkpoint every k steps (0: only at the end); each costs several training steps' time", 50
    )
    warmup_cache: str = help_field("directory of the cached base model and reward classifier", ".cache/flow")
    torch_threads: int = help_field("torch intra-op threads of the trainer", 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.torch_threads < 1:
            raise ValueError(f"run.torch_threads: expected >= 1, got {self.torch_threads}")


@dataclass
class FlowRolloutConfig:
    prompts_per_step: int = help_field("prompts (a requested class each, drawn uniformly) per step", 16)
    samples_per_prompt: int = help_field("images sampled per prompt (one group)", 8)

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1 or self.samples_per_prompt < 1:
            raise ValueError(
                f"rollout: expected prompts_per_step, samples_per_prompt >= 1; got "
                f"{self.prompts_per_step}, {self.samples_per_prompt}"
            )


@dataclass
class FlowPipelineConfig:
    ray: bool = help_field("sample on a Ray rollouter actor (false: in this process, same results)", True)
    max_staleness: int = help_field(
        "steps a batch may lag the trainer: step s trains images sampled by weights >= s - 1 - k (0: synchronous; "
        "k >= 1 overlaps sampling with training)",
        0,
    )

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError(f"pipeline.max_staleness: expected >= 0, got {self.max_staleness}")


@dataclass
class FlowRecipeConfig:
    run: FlowRunConfig = field(default_factory=FlowRunConfig)
    model: VelocityConfig = field(default_factory=VelocityConfig)
    warmup: FlowWarmupConfig = field(default_factory=FlowWarmupConfig)
    reward: RewardConfig = field(default_factory=ClassifierRewardConfig)
    rollout: FlowRolloutConfig = field(default_factory=FlowRolloutConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    algorithm: FlowGRPOConfig = field(default_factory=FlowGRPOConfig)
    train: FlowTrainConfig = field(default_factory=FlowTrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    validation: FlowValidationConfig = field(default_factory=FlowValidationConfig)
    pipeline: FlowPipelineConfig = field(default_factory=FlowPipelineConfig)

    def __post_init__(self) -> None:
        n = self.rollout.prompts_per_step
        if self.train.mini_batches_per_step > n * self.rollout.samples_per_prompt:
            images = n * self.rollout.samples_per_prompt
            raise ValueError(
                f"train.mini_batches_per_step: expected <= the step's images ({images}), got "
                f"{self.train.mini_batches_per_step}"
            )
