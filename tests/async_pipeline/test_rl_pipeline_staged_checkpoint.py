"""The pipeline's part of a checkpoint: the trainer's save is queued and the ledger snapshotted when the checkpoint
is staged; completing it waits for that save and writes the ledger that `read_ledger` reads back. Ray actors are
stood in for by objects whose `.remote` calls record their order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from async_pipeline.ledger import LedgerCounters, LedgerState
from async_pipeline.staged_checkpoint import StagedCheckpoint, read_ledger, trainer_state_dir


class _Call:
    """An actor method: `.remote` records that the call was queued (as Ray queues it) and returns its result."""

    def __init__(self, calls: list[str], name: str, fn: Callable[..., Awaitable[Any]]) -> None:
        self.calls, self.name, self.fn = calls, name, fn

    def remote(self, *args: Any) -> Awaitable[Any]:
        self.calls.append(f"{self.name}{args}")
        return self.fn(*args)


def test_staging_queues_the_save_and_snapshots_the_ledger_and_completing_writes_it(tmp_path: Path) -> None:
    calls: list[str] = []
    state = LedgerState(cursor=4, held=[1, 3], counters=LedgerCounters(leased=4, trained=2))

    async def save(path: str, policy: str | None) -> None:
        return None

    async def snapshot() -> LedgerState:
        return state

    trainer, broker = type("Trainer", (), {})(), type("Broker", (), {})()
    trainer.save, broker.snapshot = _Call(calls, "save", save), _Call(calls, "snapshot", snapshot)

    async def scenario() -> int:
        staged = await StagedCheckpoint.stage(trainer, broker, tmp_path, version=7)
        calls.append("next step queued")
        return await staged.complete(timeout_s=5.0)

    assert asyncio.run(scenario()) == 7
    assert calls == [f"save{(str(trainer_state_dir(tmp_path)), None)}", "snapshot()", "next step queued"]
    assert read_ledger(tmp_path) == state
