"""The config sections both trainer apps share (standard library and light config modules only: `--help` imports
this). Each component owns its section and builds itself from it: the algorithm (`trainers.algorithm.config`),
the training loop (`trainers.train_config`), the optimiser and backend (`trainers.backend.config`), the rollout
engine (`trainers.rollout.engine_config`), the task and warm-up (`rl_tasks`).

Defaults are the CPU recipe: digit sorting (lengths 2-12, so response lengths vary)
from a 100-step supervised warm-up base that leaves RL room, 32 prompts x 8 samples per step, GRPO with PPO clip in
bypass mode (old log-probs = the rollout's), AdamW at 1e-4, router replay on. The toy task's addition source is off
by default: its warm-up leaves it almost never right, so 8 samples per prompt almost never find a reward and RL
cannot lift it within minutes; enable it with `--task.addition_weight 0.5`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rl_tasks.calculator_task import CalculatorTaskConfig
from rl_tasks.dataset_task import DatasetTaskConfig
from rl_tasks.model_config import ModelConfig
from rl_tasks.scratchpad_task import ScratchpadTaskConfig
from rl_tasks.toy_task import ToyTaskConfig
from rollout_core.native_engine_config import EngineConfig
from run_lifecycle.fields import help_field
from run_lifecycle.run_section import RunConfig

from trainers.algorithm.config import AlgorithmConfig, OPDConfig, PPOConfig
from trainers.backend.config import BackendConfig, OptimConfig, TorchBackendConfig
from trainers.distillation.teacher import TeacherConfig, check_temperature
from trainers.recipe.debug_config import DebugConfig
from trainers.rollout.engine_config import RolloutEngineConfig
from trainers.rollout.validation_config import ValidationConfig
from trainers.train_config import TrainLoopConfig
from trainers.warmup import WarmupConfig


@dataclass
class RolloutConfig:
    prompts_per_step: int = help_field("distinct training prompts per step (complete groups)", 32)
    samples_per_prompt: int = help_field("responses sampled per prompt (one group)", 8)
    temperature: float = help_field(
        "sampling temperature of training rollouts (the trainer's log-probs use it too)", 1.0
    )
    max_new_tokens: int = help_field(
        "response budget per turn; 0: the task's default, its longest answer + 1 (EOS), or for dataset tasks "
        "task.response_tokens (room to reason) when larger",
        0,
    )
    max_resumes: int = help_field("aborted engine calls a response may resume from before it is `truncated`", 16)
    reward_timeout_s: float = help_field(
        "seconds one reward call may take; then the sample is a counted reward_error", 5.0
    )
    engine: RolloutEngineConfig = field(default_factory=lambda: EngineConfig(slots=256, kernel_threads=0))

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1 or self.samples_per_prompt < 1:
            raise ValueError(
                f"rollout: expected prompts_per_step, samples_per_prompt >= 1; got {self.prompts_per_step}, "
                f"{self.samples_per_prompt}"
            )
        if not self.temperature > 0 or self.max_new_tokens < 0 or self.max_resumes < 0:
            raise ValueError(
                f"rollout: expected temperature > 0, max_new_tokens >= 0, max_resumes >= 0; got {self.temperature}, "
                f"{self.max_new_tokens}, {self.max_resumes}"
            )
        if not self.reward_timeout_s > 0:
            raise ValueError(f"rollout.reward_timeout_s: expected > 0, got {self.reward_timeout_s}")


@dataclass
class NumericsConfig:
    true_on_policy: bool = help_field(
        "the engine samples and the trainer recomputes with batch-invariant ops (moe_models.invariant_ops): the "
        "trainer's log-probs and routing equal the rollout's bit for bit (fp32, native engine, torch backend)",
        False,
    )


@dataclass(frozen=True)
class SortTaskConfig(ToyTaskConfig):
    """The toy task with the apps' defaults (digit sorting only)."""

    kind: Literal["toy"] = "toy"
    addition_weight: float = help_field("share of addition prompts (0: off)", 0.0)
    sort_weight: float = help_field("share of digit-sorting prompts (0: off)", 1.0)


@dataclass(frozen=True)
class AppWarmupConfig(WarmupConfig):
    """The warm-up with the apps' default length: on digit sorting a base that leaves RL room (its greedy accuracy:
    docs/numerics.md); the calculator task's base depends much more on the seed."""

    steps: int = help_field("supervised optimiser steps (0: the random model)", 100)


TaskConfig = SortTaskConfig | ScratchpadTaskConfig | DatasetTaskConfig | CalculatorTaskConfig


@dataclass
class RecipeConfig:
    """Every section a trainer app has; an app adds its own (async_ppo: pipeline, ray, faults)."""

    run: RunConfig = field(default_factory=RunConfig)
    task: TaskConfig = field(default_factory=SortTaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    warmup: AppWarmupConfig = field(default_factory=AppWarmupConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=PPOConfig)
    train: TrainLoopConfig = field(default_factory=TrainLoopConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    backend: BackendConfig = field(default_factory=TorchBackendConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    numerics: NumericsConfig = field(default_factory=NumericsConfig)

    def __post_init__(self) -> None:
        self._check_family()
        if self.numerics.true_on_policy:
            self._check_true_on_policy()
        if self.debug.precision_steps and self.backend.kind != "torch":
            raise ValueError(
                f"debug.precision_steps: the probe traces our model's forward op by op, so it needs "
                f"backend.kind torch, got {self.backend.kind}"
            )
        if self.debug.precision_steps and self.rollout.engine.kind != "native":
            raise ValueError(
                f"debug.precision_steps: the probe reads the engine's model in process, so it needs "
                f"rollout.engine.kind native, got {self.rollout.engine.kind}"
            )
        if self.algorithm.kind == "opd":
            check_temperature(self.teacher, self.rollout.temperature)
            if self.teacher.engine.kind == "vllm" and self.teacher.temperature != 1.0:
                raise ValueError(
                    f"teacher.engine vllm: vLLM's prompt log-probs are at temperature 1; expected teacher.temperature "
                    f"(= rollout.temperature) 1.0, got {self.teacher.temperature}"
                )
            if isinstance(self.algorithm, OPDConfig) and self.algorithm.loss == "topk_fkl" and self.teacher.top_k == 0:
                raise ValueError("algorithm.loss topk_fkl: expected teacher.top_k > 0 (the ids it distills), got 0")

    def _check_family(self) -> None:
        """Every component that will serve or train the model (or the teacher) must serve its family."""
        family, path = self.model.resolved_family(), self.model.path
        engine = self.rollout.engine
        reasons = [
            self.backend.unsupported_family(family),
            # a checkpoint's own settings (its config.json), or a warm-up model's family at its presets
            engine.unsupported_checkpoint(path) if path else engine.unsupported_family(family),
        ]
        if path:  # settings of the checkpoint a backend cannot compute
            reasons.append(self.backend.unsupported_checkpoint(path))
        if self.algorithm.kind == "opd":
            if self.model.path and not self.teacher.checkpoint:
                raise ValueError(
                    "teacher.checkpoint: with model.path the default teacher (warmed up with the task's tokenizer) "
                    "cannot share the checkpoint's tokenizer; expected a teacher.checkpoint with it"
                )
            teacher_engine = self.teacher.engine
            if self.teacher.checkpoint:
                reasons.append(teacher_engine.unsupported_checkpoint(self.teacher.checkpoint))
            else:
                reasons.append(teacher_engine.unsupported_family(family))
        refused = [r for r in reasons if r]
        if refused:
            raise ValueError("; ".join(refused))

    def _check_true_on_policy(self) -> None:
        engine = self.rollout.engine
        got = (engine.kind, getattr(engine, "dtype", None), getattr(engine, "compile_decode", None))
        if got != ("native", "float32", False):
            raise ValueError(
                "numerics.true_on_policy: expected rollout.engine native with dtype float32 and compile_decode false "
                f"(the engine samples with the batch-invariant fp32 forward), got kind, dtype, compile_decode = {got}"
            )
        if self.backend.kind != "torch":
            raise ValueError(
                "numerics.true_on_policy: the trainer recomputes with our batch-invariant forward, so it needs "
                f"backend.kind torch, got {self.backend.kind}"
            )
        if self.backend.compute_dtype != "float32":
            raise ValueError(
                f"numerics.true_on_policy: expected backend.compute_dtype float32, got {self.backend.compute_dtype}"
            )
