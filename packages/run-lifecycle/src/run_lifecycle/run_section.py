"""The `run` section every app has: where the run lives, how long it runs, its seed, checkpoints, threads, the cache
of warm-up bases, progress bar and plots (standard library only: `--help` imports it)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from run_lifecycle.fields import help_field


@dataclass
class RunConfig:
    dir: str = help_field("run directory; empty: runs/<app>/<UTC timestamp> (with --resume: the newest one)", "")
    steps: int = help_field("training steps (prompts_per_step x samples_per_prompt responses each)", 60)
    seed: int = help_field("seeds prompt order, sampling and the trainer", 0)
    checkpoint_every: int = help_field("save a checkpoint every k steps (0: only at the end)", 10)
    keep_checkpoints: int = help_field("complete checkpoints kept on disk (oldest deleted first)", 2)
    torch_threads: int = help_field(
        "torch intra-op threads of the trainer (a native engine steps at its own count); 0: every core this process "
        "may use where the trainer runs alone (sync_ppo trains while its engine waits), 1 where rollouts run "
        "alongside it (async_ppo)",
        0,
    )
    warmup_cache: str = help_field("directory of cached warm-up base checkpoints", ".cache/warmup")
    progress: bool = help_field("show the progress bar", True)
    plots: bool = help_field("write PNG plots at the end", True)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.checkpoint_every < 0 or self.keep_checkpoints < 1 or self.torch_threads < 0:
            raise ValueError(
                f"run: expected steps >= 1, checkpoint_every >= 0, keep_checkpoints >= 1, torch_threads >= 0; got "
                f"{self.steps}, {self.checkpoint_every}, {self.keep_checkpoints}, {self.torch_threads}"
            )

    def trainer_threads(self, *, alone: bool) -> int:
        """`torch_threads`, or for 0: every core this process may use when the trainer runs `alone` (nothing
        computes while it trains), else 1."""
        if self.torch_threads or not alone:
            return self.torch_threads or 1
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
