"""Dump records of scored responses and their crash-safe files at the run directory's paths."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rollout_core import TrajectoryStatus
from trainers.dumps import DumpKind, DumpRecord, write_dump

from recipes.samples import SampleStatus, ScoredSample


def dump_record(s: ScoredSample, *, step: int, advantage: float | None = None) -> DumpRecord:
    """One line of a dump, named by the request id. A reward error is dumped with status `error` and no reward
    (never 0)."""
    ex = s.request.example
    ok = s.status is SampleStatus.OK
    record = DumpRecord.from_trajectory(
        s.trajectory,
        step=step,
        uid=s.request.request_id,
        data_source=ex.data_source,
        prompt=ex.prompt,
        response=s.response_text,
        ground_truth=ex.ground_truth,
        reward=s.reward if ok else None,
        acc=s.acc if ok else None,
        pred=s.pred if ok else None,
        advantage=advantage,
    )
    if s.status is SampleStatus.REWARD_ERROR:
        record.status = TrajectoryStatus.ERROR
    return record


def write_step_dump(path: Path, kind: DumpKind, step: int, records: Sequence[DumpRecord]) -> Path:
    """Writes `records` to exactly `path` (e.g. `rollouts/<step>.jsonl`): trainers.dumps' atomic write into the
    same directory, then an atomic rename, so a crash never leaves a torn file."""
    written = write_dump(path.parent, kind, step, records)
    os.replace(written, path)
    return path
