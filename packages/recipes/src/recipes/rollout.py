"""Generation and scoring of a batch of responses: every response becomes one typed ScoredSample.

All requests go to the engine at once (it batches them). A single-turn task resumes aborted engine calls with
prompt + tokens so far (`generate_with_resume`); a task with a tool runs `run_agent_loop`: each finished turn's
text goes to the tool, whose observation is appended with loss mask 0 and routing rows from the next turn's
prefill. An engine call that raises gives a trajectory with status `error`; a reward function that raises gives a
sample with status `reward_error`. Both are counted and excluded from training, never scored 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rl_tasks.example import TaskExample
from rl_tasks.greedy_eval import TaskTokenizer, encode_prompt
from rl_tasks.reward import RewardFn, ScoreStatus, score_safely
from rl_tasks.task import ToolEnv
from rollout_core import Engine, StopReason, Trajectory, TrajectoryStatus, generate_with_resume, run_agent_loop
from rollout_core.agent import ToolFn

from recipes.samples import GenRequest, SampleStatus, ScoredSample


def tool_fn(tool: ToolEnv, tokenizer: TaskTokenizer, example: TaskExample, prompt_len: int) -> ToolFn:
    """The agent loop's callback for one episode: decodes the turn that just ended (the context after the last
    observation, special tokens dropped, as the warm-up's evaluation does) and encodes the tool's answer."""
    seen = prompt_len

    def call(context: list[int]) -> list[int] | None:
        nonlocal seen
        observation = tool.observation(example, tokenizer.decode(context[seen:], skip_special_tokens=True))  # type: ignore[call-arg]
        if observation is None:
            return None
        ids = tokenizer.encode(observation)
        seen = len(context) + len(ids)
        return ids

    return call


async def _generate_one(engine: Engine, tokenizer: TaskTokenizer, request: GenRequest, tool: ToolEnv | None, *,
                        partial_rollout: bool, max_resumes: int) -> Trajectory:  # fmt: skip
    prompt_ids = encode_prompt(tokenizer, request.example.prompt)
    try:
        if tool is None:
            return await generate_with_resume(engine, request.request_id, prompt_ids, request.params,
                                              partial_rollout=partial_rollout, max_resumes=max_resumes)  # fmt: skip
        return await run_agent_loop(
            engine, request.request_id, prompt_ids, request.params,
            tool_fn(tool, tokenizer, request.example, len(prompt_ids)), max_turns=tool.max_turns,
            partial_rollout=partial_rollout, max_resumes=max_resumes,
        )  # fmt: skip
    except Exception as exc:  # the engine's error marks this one sample `error`; it is counted, never trained on
        return Trajectory(prompt_ids=prompt_ids, status=TrajectoryStatus.ERROR, error=f"{type(exc).__name__}: {exc}")


async def generate_all(
    engine: Engine, tokenizer: TaskTokenizer, requests: Sequence[GenRequest], *, tool: ToolEnv | None = None,
    partial_rollout: bool = True, max_resumes: int = 16,
) -> list[Trajectory]:  # fmt: skip
    """Every request submitted at once; results in request order. An aborted engine call resumes with prompt +
    tokens so far (`partial_rollout`) up to `max_resumes` times."""
    calls = [_generate_one(engine, tokenizer, r, tool, partial_rollout=partial_rollout, max_resumes=max_resumes)
             for r in requests]  # fmt: skip
    return list(await asyncio.gather(*calls))


def response_text(tokenizer: TaskTokenizer, traj: Trajectory) -> str:
    """The decoded response (every turn and observation) without special tokens and without its final EOS."""
    ids = list(traj.response_ids)
    if traj.stop_reason is StopReason.STOP and ids and ids[-1] == tokenizer.eos_id:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=True)  # type: ignore[call-arg]


def score_all(tokenizer: TaskTokenizer, reward_fn: RewardFn, requests: Sequence[GenRequest],
              trajectories: Sequence[Trajectory]) -> list[ScoredSample]:  # fmt: skip
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
