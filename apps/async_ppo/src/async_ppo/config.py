"""AsyncConfig: every knob of an async PPO run (no torch or ray imported here, so `--help` is instant).

The task, warm-up, algorithm, train and validation sections are sync_ppo's (same defaults, same meaning), so a
config that runs one trainer runs the other. Defaults: one rollouter and one trainer on their own core each,
max_staleness 1 (the rollouter generates step s + 1 while the trainer trains step s), weights pushed after every
update with pause `keep` (in-flight responses continue under the new weights, each token tagged with its version).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sync_ppo.config import AlgorithmConfig, AppWarmupConfig, TaskConfig, TrainConfig, ValidationConfig


def _help(text: str, default: object) -> object:
    return field(default=default, metadata={"help": text})


@dataclass
class RunConfig:
    dir: str = _help("run directory; empty: runs/async_ppo/<UTC timestamp> (with --resume: the newest one)", "")
    steps: int = _help("trainer steps (prompts_per_step complete groups each)", 60)
    seed: int = _help("seeds prompt order, sampling and the trainer", 0)
    checkpoint_every: int = _help("save a checkpoint every k steps (0: only at the end)", 10)
    keep_checkpoints: int = _help("complete checkpoints kept on disk (oldest deleted first)", 2)
    warmup_cache: str = _help("directory of cached warm-up base checkpoints", ".cache/warmup")
    progress: bool = _help("show the progress bar", True)
    plots: bool = _help("write PNG plots at the end", True)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.checkpoint_every < 0 or self.keep_checkpoints < 1:
            raise ValueError(
                f"run: expected steps >= 1, checkpoint_every >= 0, keep_checkpoints >= 1; got {self.steps}, "
                f"{self.checkpoint_every}, {self.keep_checkpoints}"
            )


@dataclass
class RolloutConfig:
    prompts_per_step: int = _help("distinct training prompts (complete groups) per trainer step", 32)
    samples_per_prompt: int = _help("responses sampled per prompt (one GRPO group)", 8)
    temperature: float = _help("sampling temperature of training rollouts", 1.0)
    max_new_tokens: int = _help("response budget; 0: the task's longest answer + 1 (EOS)", 0)
    engine: Literal["native", "vllm"] = _help("rollout engine: the embedded native engine or a vLLM server", "native")
    engine_slots: int = _help("native engine KV-cache slots / vLLM max_num_seqs", 256)
    torch_threads: int = _help("torch threads of each rollouter (native engine)", 1)
    compile_decode: bool = _help(
        "torch.compile the rollouters' native decode step (EngineConfig.compile_decode): a faster decode after a "
        "~5-20 s compile in each rollouter; pays off with long responses, not on the default task (prefill-bound)",
        False,
    )
    max_resumes: int = _help("aborted engine calls a response may resume from before it is `truncated`", 16)
    vllm_python: str = _help("python of the vLLM environment (empty: .vllm-env/bin/python)", "")

    def __post_init__(self) -> None:
        if min(self.prompts_per_step, self.samples_per_prompt, self.engine_slots, self.torch_threads) < 1:
            raise ValueError(
                f"rollout: expected prompts_per_step, samples_per_prompt, engine_slots, torch_threads >= 1; got "
                f"{self.prompts_per_step}, {self.samples_per_prompt}, {self.engine_slots}, {self.torch_threads}"
            )
        if not self.temperature > 0 or self.max_new_tokens < 0 or self.max_resumes < 0:
            raise ValueError(
                f"rollout: expected temperature > 0, max_new_tokens >= 0, max_resumes >= 0; got {self.temperature}, "
                f"{self.max_new_tokens}, {self.max_resumes}"
            )


@dataclass
class PipelineConfig:
    max_staleness: int = _help(
        "max age in weight versions of the oldest token of a trained sample (0: synchronous training)", 1
    )
    sync_every: int = _help("push weights to the rollouters after every k trainer steps", 1)
    pause_mode: Literal["keep", "abort"] = _help(
        "weight push: `keep` freezes in-flight responses and continues them under the new weights; `abort` "
        "ends their engine calls and resumes them with prompt + tokens so far (partial rollout)",
        "keep",
    )
    partial_rollout: bool = _help("with pause_mode abort: resume aborted responses (false: drop them, counted)", True)

    def __post_init__(self) -> None:
        if self.max_staleness < 0 or self.sync_every < 1:
            raise ValueError(
                f"pipeline: expected max_staleness >= 0 and sync_every >= 1, got {self.max_staleness}, "
                f"{self.sync_every}"
            )
        if self.sync_every > self.max_staleness + 1:
            raise ValueError(
                f"pipeline: sync_every {self.sync_every} > max_staleness + 1 = {self.max_staleness + 1}: every sample "
                "generated between pushes would be too stale to train on; raise max_staleness or push more often"
            )


@dataclass
class RayConfig:
    address: str = _help("Ray cluster to attach to (empty: start a local Ray, dashboard off)", "")
    temp_dir: str = _help("local Ray's temp dir (empty: /tmp/async_ppo_ray_<pid>)", "")
    num_rollouters: int = _help("rollouter actors (each owns one engine)", 1)
    rollouter_cpus: float = _help("CPUs reserved per rollouter", 1.0)
    trainer_cpus: float = _help("CPUs reserved for the trainer", 1.0)
    trainer_threads: int = _help("torch threads of the trainer", 1)
    helper_niceness: int = _help(
        "niceness added to rollouter and validator processes: where they share cores with the trainer (the "
        "bottleneck of a small CPU run) the trainer goes first; 0: off",
        5,
    )
    rollouter_gpus: float = _help("GPUs reserved per rollouter", 0.0)
    trainer_gpus: float = _help("GPUs reserved for the trainer", 0.0)
    startup_timeout_s: float = _help("seconds to wait for the resources (placement group) before failing", 60.0)
    call_timeout_s: float = _help("seconds a weight push or checkpoint call may take before it is an error", 300.0)
    stall_timeout_s: float = _help("seconds without a complete group before the trainer gives up with an error", 600.0)

    def __post_init__(self) -> None:
        if self.num_rollouters < 1 or self.trainer_threads < 1:
            raise ValueError(
                f"ray: expected num_rollouters >= 1 and trainer_threads >= 1, got {self.num_rollouters}, "
                f"{self.trainer_threads}"
            )
        if min(self.rollouter_cpus, self.trainer_cpus, self.rollouter_gpus, self.trainer_gpus) < 0:
            raise ValueError("ray: expected non-negative CPU and GPU reservations")


@dataclass
class FaultConfig:
    """Injected faults, for tests of the recovery paths."""

    rollouter_crash_after_groups: int = _help(
        "rollouter 0's first incarnation exits (os._exit) after finishing this many groups (0: never)", 0
    )
    push_error_at_version: int = _help("rollouter 0 raises when asked to load this weight version (0: never)", 0)


@dataclass
class AsyncConfig:
    run: RunConfig = field(default_factory=RunConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    warmup: AppWarmupConfig = field(default_factory=AppWarmupConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
