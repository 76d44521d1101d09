"""Dump records of scored responses (`trainers.dumps` writes their crash-safe files)."""

from __future__ import annotations

from rollout_core import TrajectoryStatus

from trainers.dumps import DumpRecord
from trainers.rollout.samples import SampleStatus, ScoredSample


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
