"""A run's checkpoints: `checkpoints/<step>/` holds what the app's `save` hook wrote (its trainer state and extras)
and `progress.json` (`RunProgress`).

A checkpoint is staged in a hidden folder (`stage_checkpoint`: `RunDir.staging`, created empty), filled, then
`commit_checkpoint` writes `progress.json` and hands the folder to `RunDir.commit_checkpoint` (every file fsynced,
renamed into place, `COMPLETE` last); only marked folders are ever loaded (`load_latest`), so a crash or a full disk
mid-save leaves the previous checkpoint in charge, and the partial folder is removed when the run next starts
(`RunDir.create`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from run_lifecycle import RunDir

PROGRESS_FILE = "progress.json"


@dataclass(frozen=True)
class RunProgress:
    """Where a run stands after `step`: its state holds weight `version`; `base_score` is the app's headline metric
    measured on the base model (step 0; None when it was not measured); `elapsed_s` is the wall time spent so far
    over every resumed segment (start-up and shutdown excluded)."""

    step: int
    version: int
    seed: int
    base_score: float | None
    elapsed_s: float

    def write(self, folder: Path) -> Path:
        path = folder / PROGRESS_FILE
        path.write_text(json.dumps(dataclasses.asdict(self), indent=1) + "\n")
        return path

    @classmethod
    def read(cls, folder: Path) -> RunProgress:
        path = folder / PROGRESS_FILE
        if not path.is_file():
            raise ValueError(f"{folder}: expected a checkpoint with {PROGRESS_FILE}, got none")
        return cls(**json.loads(path.read_text()))


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its folder (what the app's `save` wrote) and its progress."""

    path: Path
    progress: RunProgress


def stage_checkpoint(run: RunDir, step: int) -> Path:
    """The empty staging folder of `step`'s checkpoint (what an earlier attempt left there is removed)."""
    folder = run.staging(step)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def commit_checkpoint(run: RunDir, folder: Path, progress: RunProgress, *, keep: int) -> Path:
    """Writes `progress.json` into the filled staging `folder` and makes it the complete checkpoint of
    `progress.step`, keeping the newest `keep`. An OSError (a full disk) propagates, leaving the previous complete
    checkpoint in charge."""
    progress.write(folder)
    return run.commit_checkpoint(folder, progress.step, keep=keep)


def load_latest(run: RunDir) -> Checkpoint:
    """The newest complete checkpoint (`RunDir.latest_checkpoint`: only folders marked `COMPLETE`), for `--resume`."""
    path = run.latest_checkpoint()
    if path is None:
        raise ValueError(f"--resume: expected a complete checkpoint under {run.checkpoints}, got none")
    return Checkpoint(path, RunProgress.read(path))
