"""Trainer checkpoints: `checkpoints/<step>/` = the backend state (safetensors + JSON) and `trainer.json`.

A checkpoint is built in a hidden folder (`RunDir.staging`), fsynced, renamed into place, then marked with
`COMPLETE` (`RunDir.commit_checkpoint`); only marked folders are ever loaded (`RunDir.latest_checkpoint`), so a
crash or a full disk mid-save leaves the previous checkpoint in charge, and the partial folder is removed when the
run next starts (`RunDir.create`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from run_logging import RunDir
from run_logging.run_dir import COMPLETE
from trainers.backend import BackendState

PROGRESS_FILE = "trainer.json"


@dataclass(frozen=True)
class TrainerProgress:
    """Where the loop stands after `step`: the engine serves `engine_version`; `base_val_acc` is the greedy
    accuracy measured before the first update; `elapsed_s` the wall time spent so far."""

    step: int
    engine_version: int
    seed: int
    base_val_acc: float | None
    elapsed_s: float


def save_checkpoint(run: RunDir, state: BackendState, progress: TrainerProgress, *, keep: int) -> Path:
    """Writes the checkpoint of `progress.step`; an OSError while writing (a full disk) propagates, leaving the
    previous complete checkpoint in charge."""
    tmp = run.staging(progress.step)
    shutil.rmtree(tmp, ignore_errors=True)
    state.save(tmp)
    (tmp / PROGRESS_FILE).write_text(json.dumps(dataclasses.asdict(progress), indent=1) + "\n")
    return run.commit_checkpoint(tmp, progress.step, keep=keep)


def load_checkpoint(path: Path) -> tuple[BackendState, TrainerProgress]:
    if not (path / COMPLETE).exists():
        raise ValueError(f"load_checkpoint: expected a complete checkpoint ({path / COMPLETE}), got none")
    meta = json.loads((path / PROGRESS_FILE).read_text())
    return BackendState.load(path), TrainerProgress(**meta)
