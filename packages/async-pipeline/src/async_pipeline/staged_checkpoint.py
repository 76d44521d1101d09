"""The pipeline's part of a checkpoint folder: the trainer actor's backend state and the ledger of every prompt
started but not trained (queued and in flight).

Order is what makes it exact: `StagedCheckpoint.stage` queues the trainer's save and snapshots the ledger before
the driver queues the next step's take and update, so both describe the state after the step; `complete` then
waits for the save and writes the ledger. The folder's commit (`progress.json`, `COMPLETE`) is the run loop's.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.recipe.export import POLICY_DIR

from async_pipeline.ledger import LedgerState

LEDGER_FILE = "ledger.json"  # every prompt started but not trained (queued and in flight)
TRAINER_DIR = "trainer"  # the trainer actor's backend state


def trainer_state_dir(folder: Path) -> Path:
    return folder / TRAINER_DIR


def read_ledger(folder: Path) -> LedgerState:
    return LedgerState.from_json_dict(json.loads((folder / LEDGER_FILE).read_text()))


@dataclass(frozen=True)
class StagedCheckpoint:
    """A checkpoint begun after a step: `saved` is the trainer's queued save call (a Ray object reference),
    `ledger` the broker's snapshot, `version` the trainer's weight version after the step."""

    folder: Path
    saved: Any
    ledger: LedgerState
    version: int

    @classmethod
    async def stage(
        cls, trainer: Any, broker: Any, folder: Path, version: int, *, final: bool = False
    ) -> StagedCheckpoint:
        """Queues the trainer's save into `folder` (with `final`, the policy as a Hugging Face folder too:
        `trainers.recipe.export.POLICY_DIR`) and snapshots the broker's ledger; call it before the next step's take and
        update are queued."""
        policy = str(folder / POLICY_DIR) if final else None
        saved = trainer.save.remote(str(trainer_state_dir(folder)), policy)
        return cls(folder, saved, await broker.snapshot.remote(), version)

    async def complete(self, timeout_s: float) -> int:
        """Waits (up to `timeout_s`) for the trainer's save, writes the ledger; returns the saved version."""
        await asyncio.wait_for(self.saved, timeout_s)
        (self.folder / LEDGER_FILE).write_text(json.dumps(self.ledger.to_json_dict(), indent=1) + "\n")
        return self.version
