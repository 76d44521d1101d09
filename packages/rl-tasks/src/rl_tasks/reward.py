"""The RewardFn seam, the scored record, and error-safe scoring.

A reward function that raises never becomes a silent 0.0: `score_safely` returns a record whose status is
`error` with the message, and the caller excludes that sample and counts it (`RewardStats`).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Protocol

from rl_tasks.example import TaskExample


@dataclass(frozen=True)
class RewardResult:
    """`reward`: the scalar the advantage uses; `acc`: correctness in [0, 1] for metrics; `pred`: the
    extracted answer (None when nothing could be extracted), used for majority voting."""

    reward: float
    acc: float
    pred: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.reward, int | float) or not math.isfinite(self.reward):
            raise ValueError(f"RewardResult.reward: expected a finite float, got {self.reward!r}")
        if not isinstance(self.acc, int | float) or not 0.0 <= self.acc <= 1.0:
            raise ValueError(f"RewardResult.acc: expected a float in [0, 1], got {self.acc!r}")
        if self.pred is not None and not isinstance(self.pred, str):
            raise ValueError(f"RewardResult.pred: expected a str or None, got {type(self.pred).__name__}")


class RewardFn(Protocol):
    """Scores one decoded response (special tokens excluded) against its example."""

    def __call__(self, response_text: str, example: TaskExample) -> RewardResult: ...


class ScoreStatus(enum.StrEnum):
    OK = "ok"
    ERROR = "error"  # the reward function raised or returned something other than a RewardResult


@dataclass(frozen=True)
class ScoredResponse:
    """Outcome of scoring one response. `result` is set iff `status` is ok; `error` iff it is error."""

    uid: str
    data_source: str
    status: ScoreStatus
    result: RewardResult | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.status is ScoreStatus.OK) != (self.result is not None):
            raise ValueError(f"ScoredResponse: status {self.status} with result {self.result!r} is inconsistent")
        if (self.status is ScoreStatus.ERROR) != (self.error is not None):
            raise ValueError(f"ScoredResponse: status {self.status} with error {self.error!r} is inconsistent")


def score_safely(fn: RewardFn, response_text: str, example: TaskExample) -> ScoredResponse:
    """Calls `fn`; any exception (or a non-RewardResult return) gives an `error` record with the message."""
    try:
        result = fn(response_text, example)
    except Exception as exc:  # the error is returned, never swallowed into a reward
        return ScoredResponse(example.uid, example.data_source, ScoreStatus.ERROR, error=f"{type(exc).__name__}: {exc}")
    if not isinstance(result, RewardResult):
        msg = f"reward function returned {type(result).__name__}, expected RewardResult"
        return ScoredResponse(example.uid, example.data_source, ScoreStatus.ERROR, error=msg)
    return ScoredResponse(example.uid, example.data_source, ScoreStatus.OK, result=result)


@dataclass
class RewardStats:
    """Counts of scored responses. `errors_by_source` counts errors per data source; `last_error` keeps the
    most recent message so a log line can show it."""

    num_ok: int = 0
    num_error: int = 0
    reward_sum: float = 0.0
    acc_sum: float = 0.0
    errors_by_source: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None

    def add(self, scored: ScoredResponse) -> None:
        if scored.status is ScoreStatus.OK:
            assert scored.result is not None  # guaranteed by ScoredResponse
            self.num_ok += 1
            self.reward_sum += scored.result.reward
            self.acc_sum += scored.result.acc
            return
        self.num_error += 1
        self.errors_by_source[scored.data_source] = self.errors_by_source.get(scored.data_source, 0) + 1
        self.last_error = scored.error

    @property
    def mean_reward(self) -> float:
        """Mean reward over ok responses (errors are excluded, not counted as 0)."""
        if self.num_ok == 0:
            raise ValueError("RewardStats.mean_reward: expected at least one ok response, got 0")
        return self.reward_sum / self.num_ok

    @property
    def mean_acc(self) -> float:
        if self.num_ok == 0:
            raise ValueError("RewardStats.mean_acc: expected at least one ok response, got 0")
        return self.acc_sum / self.num_ok

    def metrics(self, prefix: str = "reward") -> dict[str, float]:
        """Flat metrics for a logger; the means are present only when some response scored ok."""
        out = {f"{prefix}/num_ok": float(self.num_ok), f"{prefix}/num_error": float(self.num_error)}
        if self.num_ok:
            out[f"{prefix}/mean"] = self.mean_reward
            out[f"{prefix}/acc"] = self.mean_acc
        return out
