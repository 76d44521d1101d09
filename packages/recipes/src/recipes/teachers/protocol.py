"""TeacherEngine: what serves a distillation teacher's scores. One call scores many responses (the engine batches
them); `busy_s` and `tokens` count the time spent in calls and the tokens scored (prompt + response)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rollout_core.teacher_scores import TeacherScores

Pair = tuple[Sequence[int], Sequence[int]]  # (prompt_ids, response_ids)


class TeacherEngine(Protocol):
    busy_s: float
    tokens: int

    async def score(self, pairs: Sequence[Pair]) -> list[TeacherScores]:
        """One TeacherScores per pair, in order (rows: the response tokens, in the student's shift)."""
        ...

    async def close(self) -> None: ...
