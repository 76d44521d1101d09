"""Shared by the async_ppo test modules: the tiny task settings and reading trained prompts back from dumps."""

from __future__ import annotations

from pathlib import Path

from trainers.dumps import read_dump

TASK = [
    "--task.train_size", "400", "--task.val_size", "12", "--task.addition_weight", "0.5", "--task.sort_weight", "0.5",
    "--warmup.steps", "8", "--warmup.examples_per_step", "16",
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
