"""The apps under faults: tiny configurations of both apps (parsed by their own command lines), the processes a
test's Ray session started, and which prompts a run trained (read back from its rollout dumps)."""

from __future__ import annotations

import os
from pathlib import Path

from trainers.dumps import read_dump

TASK = [
    "--task.train_size", "400", "--task.val_size", "12", "--task.addition_weight", "0.5", "--task.sort_weight", "0.5",
    "--warmup.steps", "8", "--warmup.examples_per_step", "16",
]  # fmt: skip
COMMON = [
    *TASK, "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "3", "--rollout.engine.slots", "16",
    "--train.mismatch_sample_seqs", "4", "--validation.every_steps", "2", "--validation.max_prompts", "8",
    "--run.progress", "false", "--run.plots", "false", "--run.keep_checkpoints", "10",
]  # fmt: skip
PROMPTS_PER_STEP = 4


def app_flags(run_dir: Path, warmup_cache: Path, *flags: str) -> list[str]:
    return [*COMMON, "--run.warmup_cache", str(warmup_cache), "--run.dir", str(run_dir), *flags]


def resume_flags(run_dir: Path, *flags: str) -> list[str]:
    """`--resume` of the run in `run_dir`: its saved config is the base, `flags` override it."""
    return ["--resume", "--run.dir", str(run_dir), *flags]


def trained_prompt_indices(run_dir: Path, steps: range) -> list[int]:
    """The prompt index of every group trained at `steps` (uids `s<slot step>-p<position>-r<j>`)."""
    out = []
    for step in steps:
        groups = {r.uid.rsplit("-r", 1)[0] for r in read_dump(run_dir / "rollouts" / f"{step}.jsonl")}
        for g in groups:
            slot, pos = g[1:].split("-p")
            out.append((int(slot) - 1) * PROMPTS_PER_STEP + int(pos))
    return out


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendant_pids(title: str) -> list[int]:
    """Processes started (transitively) by this one whose command line starts with `title`, e.g. the Ray worker
    of an actor class (`ray::TrainerActor`): only the test's own Ray session can match."""
    tree, found, todo = _children(), [], [os.getpid()]
    while todo:
        pid = todo.pop()
        for child in tree.get(pid, []):
            todo.append(child)
            try:
                cmdline = (Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if cmdline.startswith(title):
                found.append(child)
    return sorted(found)
