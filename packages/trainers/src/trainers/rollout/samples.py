"""The typed records of one response: the request that asks for it and the scored sample it becomes."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardResult, ScoredResponse
from rollout_core import SamplingParams, Trajectory
from rollout_core.teacher_scores import TeacherScores


class SampleStatus(enum.StrEnum):
    OK = "ok"  # trajectory ok and reward scored: a training sample
    NOT_OK = "not_ok"  # trajectory truncated, aborted or failed in the engine: dropped, counted
    REWARD_ERROR = "reward_error"  # the reward function raised: dropped, counted (never a 0 reward)


@dataclass(frozen=True)
class GenRequest:
    """One response to generate. `group_id` names the prompt's group in this step; `group_index` is the prompt's
    position in the step and `sample_index` the response's index j in its group."""

    request_id: str
    group_id: str
    example: TaskExample
    group_index: int
    sample_index: int
    params: SamplingParams


@dataclass(frozen=True)
class ScoredSample:
    request: GenRequest
    trajectory: Trajectory
    response_text: str
    scored: ScoredResponse | None  # None when the trajectory was not ok (nothing to score)
    status: SampleStatus
    teacher: TeacherScores | None = None  # distillation: the teacher's scores of the response (ok samples only)

    @property
    def uid(self) -> str:
        return self.request.request_id

    def _result(self) -> RewardResult:
        if self.status is not SampleStatus.OK or self.scored is None or self.scored.result is None:
            raise ValueError(f"sample {self.request.request_id}: expected status ok to read a score, got {self.status}")
        return self.scored.result

    @property
    def reward(self) -> float:
        return self._result().reward

    @property
    def acc(self) -> float:
        return self._result().acc

    @property
    def pred(self) -> str | None:
        return self._result().pred
