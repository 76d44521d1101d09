"""The tiny sync PPO settings shared by tests/sync_ppo (a uniquely named module: `conftest` is ambiguous when
several test folders are collected together)."""

from __future__ import annotations

TINY = [
    "--warmup.steps", "8", "--warmup.examples_per_step", "16",
    "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "3",
    "--train.mismatch_sample_seqs", "4", "--validation.every_steps", "2", "--validation.max_prompts", "8",
    "--run.progress", "false", "--run.checkpoint_every", "1", "--run.keep_checkpoints", "5",
]  # fmt: skip

TOY_TASK = [
    "--task.train_size", "400", "--task.val_size", "12", "--task.addition_weight", "0.5", "--task.sort_weight", "0.5",
]  # fmt: skip
NATIVE_ENGINE = ["--rollout.engine.slots", "16"]
