"""Async checkpoints: `checkpoints/<step>/` = the trainer's backend state, `ledger.json` (every prompt started
but not trained: queued and in-flight) and `progress.json`.

Taken between two trainer steps, after step `s`'s push: the ledger then holds exactly the prompts that steps
<= s did not train, so `--resume` re-runs those first and trains none twice. Written to a hidden folder
(`RunDir.staging`; the trainer actor fsyncs its own files), fsynced, renamed into place, then marked `COMPLETE`
(`RunDir.commit_checkpoint`); only marked folders are ever loaded (a crash or a full disk mid-save keeps the
previous), and a partial folder is removed when the run next starts (`RunDir.create`).
Queued groups are stored as prompt ids, not as responses: they are generated again under the resumed weights.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from rl_pipeline.ledger import LedgerState
from run_logging import RunDir
from run_logging.run_dir import COMPLETE

PROGRESS_FILE = "progress.json"
LEDGER_FILE = "ledger.json"
TRAINER_DIR = "trainer"


@dataclass(frozen=True)
class PipelineProgress:
    """After trainer step `step`: the rollouters serve `version`; `base_val_acc` was measured on the base model;
    `elapsed_s` is the wall time spent so far (over every resumed segment)."""

    step: int
    version: int
    seed: int
    base_val_acc: float | None
    elapsed_s: float


def staging_dir(run: RunDir, step: int) -> Path:
    """Where the trainer writes its state before `commit_checkpoint` (a hidden sibling of the final folder),
    created empty."""
    tmp = run.staging(step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def commit_checkpoint(run: RunDir, tmp: Path, ledger: LedgerState, progress: PipelineProgress, *, keep: int) -> Path:
    (tmp / LEDGER_FILE).write_text(json.dumps(ledger.to_json_dict(), indent=1) + "\n")
    (tmp / PROGRESS_FILE).write_text(json.dumps(dataclasses.asdict(progress), indent=1) + "\n")
    return run.commit_checkpoint(tmp, progress.step, keep=keep)


@dataclass(frozen=True)
class LoadedCheckpoint:
    path: Path
    trainer_dir: Path
    ledger: LedgerState
    progress: PipelineProgress


def load_checkpoint(path: Path) -> LoadedCheckpoint:
    if not (path / COMPLETE).exists():
        raise ValueError(f"load_checkpoint: expected a complete checkpoint ({path / COMPLETE}), got none")
    ledger = LedgerState.from_json_dict(json.loads((path / LEDGER_FILE).read_text()))
    progress = PipelineProgress(**json.loads((path / PROGRESS_FILE).read_text()))
    return LoadedCheckpoint(path, path / TRAINER_DIR, ledger, progress)
