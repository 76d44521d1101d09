"""TeacherSet: a run's teacher engines, one per key of its `trainers.distillation.teacher.TeacherRoster`, behind one
scoring call that sends each response to its data source's teacher (the default teacher for sources that name none)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rollout_core.teacher_engine import Pair, TeacherEngine
from rollout_core.teacher_scores import TeacherScores

from trainers.distillation.teacher import TeacherRoster


class TeacherSet:
    def __init__(self, roster: TeacherRoster, engines: dict[str, TeacherEngine]) -> None:
        keys = [k for k, _ in roster.items()]
        if sorted(engines) != sorted(keys):
            raise ValueError(f"TeacherSet: expected an engine for each teacher {keys}, got {sorted(engines)}")
        self.roster, self.engines = roster, engines

    @property
    def busy_s(self) -> float:
        """Seconds the engines spent in scoring calls, summed over the teachers."""
        return sum(e.busy_s for e in self.engines.values())

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self.engines.values())

    async def score(self, pairs: Sequence[Pair], sources: Sequence[str]) -> list[TeacherScores]:
        """One TeacherScores per pair, in order; pair i is scored by the teacher of data source `sources[i]`, every
        teacher's share in one call, the teachers concurrently."""
        if len(pairs) != len(sources):
            raise ValueError(f"TeacherSet.score: expected a data source per pair ({len(pairs)}), got {len(sources)}")
        by_key: dict[str, list[int]] = {}
        for i, source in enumerate(sources):
            by_key.setdefault(self.roster.key_of(source), []).append(i)
        shares = await asyncio.gather(*(self.engines[k].score([pairs[i] for i in rows]) for k, rows in by_key.items()))
        out: list[TeacherScores | None] = [None] * len(pairs)
        for rows, scores in zip(by_key.values(), shares, strict=True):
            for i, s in zip(rows, scores, strict=True):
                out[i] = s
        return out  # type: ignore[return-value]  # every index is in exactly one share

    async def close(self) -> None:
        """Closes every engine (all of them, even when one fails; the first error is raised afterwards)."""
        errors = await asyncio.gather(*(e.close() for e in self.engines.values()), return_exceptions=True)
        for e in errors:
            if isinstance(e, BaseException):
                raise e
