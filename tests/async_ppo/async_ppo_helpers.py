"""Shared by the async_ppo test modules (a uniquely named module: `conftest` is ambiguous when several test
folders are collected together): the tiny task and run settings and reading trained prompts back from dumps."""

from __future__ import annotations

from pathlib import Path

from trainers.dumps import read_dump

TASK = [
    "--task.train_size", "400", "--task.val_size", "12", "--task.addition_weight", "0.5", "--task.sort_weight", "0.5",
    "--warmup.steps", "8", "--warmup.examples_per_step", "16",
]  # fmt: skip


TINY = [  # the tiny async settings (tests/async_ppo/conftest.py builds configs from them)
    *TASK,
    "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "3", "--rollout.engine.slots", "16",
    "--train.mismatch_sample_seqs", "4", "--validation.every_steps", "2", "--validation.max_prompts", "8",
    "--run.progress", "false", "--run.plots", "false", "--run.checkpoint_every", "1", "--run.keep_checkpoints", "10",
]  # fmt: skip


def trained_prompt_indices(run_dir: Path, prompts_per_step: int, steps: range) -> list[int]:
    """The prompt index of every group trained at `steps`, read back from the rollout dumps' uids
    (`s<slot step>-p<position>-r<j>`)."""
    out = []
    for step in steps:
        groups = {r.uid.rsplit("-r", 1)[0] for r in read_dump(run_dir / "rollouts" / f"{step}.jsonl")}
        for g in groups:
            slot, pos = g[1:].split("-p")
            out.append((int(slot) - 1) * prompts_per_step + int(pos))
    return out
