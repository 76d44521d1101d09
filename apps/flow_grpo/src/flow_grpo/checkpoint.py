"""Checkpoints of a FlowGRPO run: `checkpoints/<step>/` holds the backend state (weights, AdamW moments and step
counts, torch RNG), `progress.json`, and every batch already submitted but not yet trained (`pending/<step>.npz`):
with `pipeline.max_staleness k` up to k + 1 batches are in flight at a checkpoint; they are saved rather than
lost or re-sampled, so a resumed run trains exactly the batches the uninterrupted run would have.

Staged, fsynced and committed by `RunDir.commit_checkpoint` (only folders marked COMPLETE are ever loaded).
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

from flow_grpo.batch import RolloutBatch

PROGRESS_FILE = "progress.json"
PENDING = "pending"


@dataclass(frozen=True)
class FlowProgress:
    """After `step`: the backend holds weights `step`; `base_val_reward` was measured before the first update."""

    step: int
    seed: int
    base_val_reward: float
    elapsed_s: float


def save_checkpoint(
    run: RunDir, state: BackendState, progress: FlowProgress, pending: list[RolloutBatch], *, keep: int
) -> Path:
    tmp = run.staging(progress.step)
    shutil.rmtree(tmp, ignore_errors=True)
    state.save(tmp)
    (tmp / PENDING).mkdir()
    for batch in pending:
        batch.save(tmp / PENDING / f"{batch.step}.npz")
    (tmp / PROGRESS_FILE).write_text(json.dumps(dataclasses.asdict(progress), indent=1) + "\n")
    return run.commit_checkpoint(tmp, progress.step, keep=keep)


def load_checkpoint(path: Path) -> tuple[BackendState, FlowProgress, list[RolloutBatch]]:
    if not (path / COMPLETE).exists():
        raise ValueError(f"load_checkpoint: expected a complete checkpoint ({path / COMPLETE}), got none")
    progress = FlowProgress(**json.loads((path / PROGRESS_FILE).read_text()))
    pending = sorted((RolloutBatch.load(p) for p in (path / PENDING).glob("*.npz")), key=lambda b: b.step)
    return BackendState.load(path), progress, pending
