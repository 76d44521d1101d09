"""Generation and scoring of one batch of responses: every response becomes one typed ScoredSample.

An engine call that raises gives a trajectory with status `error`; a reward function that raises gives a
sample with status `reward_error`. Both are counted and excluded from training, never scored 0.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from dataclasses import dataclass

from moe_models import CharTokenizer
from rl_tasks.example import TaskExample
from rl_tasks.greedy_eval import encode_prompt
from rl_tasks.reward import RewardFn, RewardResult, ScoredResponse, ScoreStatus, score_safely
from rollout_core import Engine, SamplingParams, StopReason, Trajectory, TrajectoryStatus, generate_with_resume


class SampleStatus(enum.StrEnum):
    OK = "ok"  # trajectory ok and reward scored: a training sample
    NOT_OK = "not_ok"  # trajectory truncated, aborted or failed in the engine: dropped
    REWARD_ERROR = "reward_error"  # the reward function raised: dropped


@dataclass(frozen=True)
class GenRequest:
    """One response to generate. `group_id` names the prompt's GRPO group in this step; `group_index` is the
    prompt's position in the step and `sample_index` the response's index j in its group."""

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


async def _generate_one(
    engine: Engine, request: GenRequest, prompt_ids: list[int], *, partial_rollout: bool, max_resumes: int
) -> Trajectory:
    try:
        return await generate_with_resume(engine, request.request_id, prompt_ids, request.params,
                                          partial_rollout=partial_rollout, max_resumes=max_resumes)  # fmt: skip
    except Exception as exc:  # the engine's error marks this one sample `error`; it is counted, never trained on
        return Trajectory(prompt_ids=prompt_ids, status=TrajectoryStatus.ERROR, error=f"{type(exc).__name__}: {exc}")


async def generate_all(
    engine: Engine, tokenizer: CharTokenizer, requests: Sequence[GenRequest], *, partial_rollout: bool = True,
    max_resumes: int = 16,
) -> list[Trajectory]:  # fmt: skip
    """All requests submitted at once (the engine batches them); results in request order. An aborted engine call
    resumes with prompt + tokens so far (`partial_rollout`) up to `max_resumes` times (`generate_with_resume`)."""
    calls = [
        _generate_one(engine, r, encode_prompt(tokenizer, r.example.prompt), partial_rollout=partial_rollout,
                      max_resumes=max_resumes)
        for r in requests
    ]  # fmt: skip
    return list(await asyncio.gather(*calls))


def response_text(tokenizer: CharTokenizer, traj: Trajectory) -> str:
    """The decoded response without its final EOS and without special tokens."""
    ids = list(traj.response_ids)
    if traj.stop_reason is StopReason.STOP and ids and ids[-1] == tokenizer.eos_id:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=True)  # type: ignore[call-arg]


def score_all(
    tokenizer: CharTokenizer, reward_fn: RewardFn, requests: Sequence[GenRequest], trajectories: Sequence[Trajectory]
) -> list[ScoredSample]:
    out = []
    for request, traj in zip(requests, trajectories, strict=True):
        if traj.status is not TrajectoryStatus.OK:
            out.append(ScoredSample(request, traj, "", None, SampleStatus.NOT_OK))
            continue
        text = response_text(tokenizer, traj)
        scored = score_safely(reward_fn, text, request.example)
        status = SampleStatus.OK if scored.status is ScoreStatus.OK else SampleStatus.REWARD_ERROR
        out.append(ScoredSample(request, traj, text, scored, status))
    return out
