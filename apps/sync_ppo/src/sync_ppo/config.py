"""AppConfig: every knob of a sync PPO run, as typed nested sections (no torch imported here).

Defaults are the measured CPU recipe: digit sorting (lengths 2-12, so response lengths vary) from a 100-step
supervised warm-up base (~40% greedy accuracy), 32 prompts x 8 samples per step, GRPO with PPO clip in bypass
mode (old log-probs = the rollout's), AdamW at 1e-4, router replay on. The toy task's addition source is off by
default: its warm-up leaves it near 2% (1.7% after 250 steps), where 8 samples per prompt almost never find a
reward, so RL cannot lift it within the 10-minute budget; enable it with `--task.addition_weight 0.5`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rl_tasks.toy_task import ToyTaskConfig
from rl_tasks.warmup import WarmupConfig


def _help(text: str, default: object) -> object:
    return field(default=default, metadata={"help": text})


@dataclass
class RunConfig:
    dir: str = _help("run directory; empty: runs/sync_ppo/<UTC timestamp> (with --resume: the newest one)", "")
    steps: int = _help("training steps (one batch of prompts_per_step x samples_per_prompt each)", 60)
    seed: int = _help("seeds prompt order, sampling and the trainer", 0)
    checkpoint_every: int = _help("save a checkpoint every k steps (0: only at the end)", 10)
    keep_checkpoints: int = _help("complete checkpoints kept on disk (oldest deleted first)", 2)
    torch_threads: int = _help("torch intra-op threads (1 is fastest for tiny models on a shared CPU)", 1)
    warmup_cache: str = _help("directory of cached warm-up base checkpoints", ".cache/warmup")
    progress: bool = _help("show the progress bar", True)
    plots: bool = _help("write PNG plots at the end", True)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.checkpoint_every < 0 or self.keep_checkpoints < 1 or self.torch_threads < 1:
            raise ValueError(
                f"run: expected steps >= 1, checkpoint_every >= 0, keep_checkpoints >= 1, torch_threads >= 1; got "
                f"{self.steps}, {self.checkpoint_every}, {self.keep_checkpoints}, {self.torch_threads}"
            )


@dataclass
class RolloutConfig:
    prompts_per_step: int = _help("distinct training prompts per step", 32)
    samples_per_prompt: int = _help("responses sampled per prompt (one GRPO group)", 8)
    temperature: float = _help("sampling temperature of training rollouts", 1.0)
    max_new_tokens: int = _help("response budget; 0: the task's longest answer + 1 (EOS)", 0)
    engine_slots: int = _help("native engine KV-cache slots (sequences decoded together)", 256)
    compile_decode: bool = _help(
        "torch.compile the native engine's decode step (EngineConfig.compile_decode): a faster decode after a "
        "~5-20 s compile; pays off with long responses, not on the default task (8-token answers: prefill-bound)",
        False,
    )

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1 or self.samples_per_prompt < 1 or self.engine_slots < 1:
            raise ValueError(
                f"rollout: expected prompts_per_step, samples_per_prompt, engine_slots >= 1; got "
                f"{self.prompts_per_step}, {self.samples_per_prompt}, {self.engine_slots}"
            )
        if not self.temperature > 0 or self.max_new_tokens < 0:
            raise ValueError(
                f"rollout: expected temperature > 0 and max_new_tokens >= 0, got {self.temperature}, "
                f"{self.max_new_tokens}"
            )


@dataclass
class AlgorithmConfig:
    advantage: Literal["grpo", "drgrpo", "rloo"] = _help("advantage estimator (drgrpo: GRPO without std)", "grpo")
    old_log_probs: Literal["rollout", "recompute"] = _help(
        "PPO's old policy: the rollout's log-probs (bypass mode) or a recomputed trainer forward", "rollout"
    )
    router_replay: bool = _help("replay the engine's routed experts in every trainer forward (R3)", True)
    policy_loss: Literal["ppo_clip", "decoupled"] = _help(
        "ppo_clip: PPO against the old policy; decoupled: AReaL's decoupled PPO (proximal = recomputed old policy, "
        "behaviour = rollout log-probs; off-policy correction for stale samples; needs old_log_probs recompute)",
        "ppo_clip",
    )
    is_cap: float = _help("decoupled: truncate the behaviour importance weight at this cap (TIS; 0: no cap)", 0.0)

    def __post_init__(self) -> None:
        if self.policy_loss == "decoupled" and self.old_log_probs != "recompute":
            raise ValueError(
                "algorithm: policy_loss decoupled needs old_log_probs = recompute (the proximal policy), got "
                f"old_log_probs = {self.old_log_probs!r}"
            )


@dataclass
class TrainConfig:
    """Mirrors `trainers.backend.TorchBackendConfig` (kept here so `--help` never imports torch)."""

    lr: float = _help("AdamW learning rate", 1e-4)
    weight_decay: float = _help("AdamW decoupled weight decay", 0.0)
    grad_clip: float = _help("max global grad norm per optimiser step", 1.0)
    ppo_epochs: int = _help("passes over each batch", 1)
    mini_batches_per_step: int = _help("optimiser steps per pass; the batch is padded to a multiple of it", 1)
    micro_batch_tokens: int = _help("padded tokens (rows x width) per trainer forward", 8192)
    clip_low: float = _help("PPO ratio clip below 1", 0.2)
    clip_high: float = _help("PPO ratio clip above 1", 0.2)
    dual_clip_c: float = _help("dual-clip cap for negative advantages (<= 1: off)", 3.0)
    agg_mode: str = _help("loss aggregation: token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean",
                          "token-mean")  # fmt: skip
    mismatch_sample_seqs: int = _help("sequences per step also scored WITHOUT replay (mismatch metric)", 32)


@dataclass
class ValidationConfig:
    every_steps: int = _help("validate every k steps (and before the first and after the last step)", 10)
    greedy: bool = _help("greedy decoding of every validation prompt (val-core/<source>/acc/mean@1)", True)
    samples_per_prompt: int = _help("also sample n >= 2 responses per prompt (mean@n, pass@k, ...); 0: off", 0)
    temperature: float = _help("temperature of the sampled validation responses", 1.0)
    max_prompts: int = _help("validation prompts used (the first of the split); 0: all", 0)

    def __post_init__(self) -> None:
        if self.every_steps < 1 or self.max_prompts < 0 or not self.temperature > 0:
            raise ValueError(
                f"validation: expected every_steps >= 1, max_prompts >= 0, temperature > 0; got {self.every_steps}, "
                f"{self.max_prompts}, {self.temperature}"
            )
        if self.samples_per_prompt == 1 or self.samples_per_prompt < 0:
            raise ValueError(
                f"validation.samples_per_prompt: expected 0 (off) or >= 2 (n=1 is the greedy pass's name), got "
                f"{self.samples_per_prompt}"
            )
        if not self.greedy and self.samples_per_prompt == 0:
            raise ValueError("validation: expected greedy = true or samples_per_prompt >= 2, got neither")


@dataclass(frozen=True)
class TaskConfig(ToyTaskConfig):
    """The toy task with this app's defaults (sorting only); run_config builds sections from their class
    defaults, so the defaults live on the class."""

    addition_weight: float = 0.0
    sort_weight: float = 1.0


@dataclass(frozen=True)
class AppWarmupConfig(WarmupConfig):
    """The warm-up with this app's default length: a base near 40% greedy accuracy, leaving RL room."""

    steps: int = 100


@dataclass
class AppConfig:
    run: RunConfig = field(default_factory=RunConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    warmup: AppWarmupConfig = field(default_factory=AppWarmupConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
