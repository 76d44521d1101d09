"""SyncConfig: every knob of a sync PPO run, as typed nested sections (no torch imported here).

The sections are the ones every trainer app shares (`trainers.recipe.config.RecipeConfig`: run, task, warmup, rollout,
algorithm, train, optim, backend, validation); sync training adds none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from trainers.recipe.config import RecipeConfig


@dataclass
class SyncConfig(RecipeConfig):
    """A synchronous run: every response of step s is sampled by the weights of step s - 1."""

    RUNS_ROOT: ClassVar[Path] = Path("runs") / "sync_ppo"  # where a run without `run.dir` gets its directory
