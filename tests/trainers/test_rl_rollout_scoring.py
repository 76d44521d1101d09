"""Reward errors and failed trajectories are counted and excluded (never a 0 reward); pads stay inert."""

from __future__ import annotations

import pytest
from moe_models import build_char_tokenizer
from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rl_tasks.reward import RewardResult
from rollout_core import SamplingParams, StopReason, Trajectory, TrajectoryStatus
from trainers import PADDING_DATA_SOURCE, token_advantages
from trainers.rollout.dumps import dump_record
from trainers.rollout.rollout import score_all
from trainers.rollout.samples import GenRequest, SampleStatus
from trainers.rollout.step_batch import build_step_batch

TOK = build_char_tokenizer("0123456789+=")


def reward_or_raise(text: str, example: TaskExample) -> RewardResult:
    if text == "9":
        raise RuntimeError("grader crashed")
    hit = text == example.ground_truth
    return RewardResult(reward=float(hit), acc=float(hit), pred=text)


def _case(responses: list[str], statuses: list[TrajectoryStatus]) -> list:
    ex = TaskExample("u0", "addition", "1+2=", "3")
    requests, trajs = [], []
    for j, (text, status) in enumerate(zip(responses, statuses, strict=True)):
        requests.append(GenRequest(f"s1-p0-r{j}", "s1-p0", ex, 0, j, SamplingParams(max_new_tokens=4)))
        ids = [*TOK.encode(text), TOK.eos_id]
        trajs.append(
            Trajectory(
                prompt_ids=[TOK.bos_id, *TOK.encode(ex.prompt)],
                response_ids=ids,
                response_log_probs=[-0.5] * len(ids),
                token_versions=[0] * len(ids),
                loss_mask=[1] * len(ids),
                stop_reason=StopReason.STOP,
                status=status,
            )
        )
    return score_all(Renderer(TOK, "plain"), reward_or_raise, requests, trajs)


def test_reward_errors_and_failed_trajectories_are_excluded_not_zeroed() -> None:
    ok, bad = TrajectoryStatus.OK, TrajectoryStatus.TRUNCATED
    scored = _case(["3", "9", "4", "3"], [ok, ok, ok, bad])
    assert [s.status for s in scored] == [
        SampleStatus.OK,
        SampleStatus.REWARD_ERROR,
        SampleStatus.OK,
        SampleStatus.NOT_OK,
    ]
    with pytest.raises(ValueError, match="expected status ok"):
        _ = scored[1].reward
    sb = build_step_batch(scored, multiple=4, pad_token_id=TOK.pad_id)
    assert [s.uid for s in sb.samples[:2]] == ["s1-p0-r0", "s1-p0-r2"]
    assert sb.num_padding == 2 and all(s.data_source == PADDING_DATA_SOURCE for s in sb.samples[2:])
    advantages = token_advantages("grpo", sb.batch).per_sample
    assert advantages[2:].abs().sum() == 0
    assert advantages[0] > 0 > advantages[1]
    record = dump_record(scored[1], step=1)
    assert record.status == TrajectoryStatus.ERROR and record.reward is None and record.acc is None


def test_a_step_without_any_ok_sample_raises_with_the_counts() -> None:
    scored = _case(["9"], [TrajectoryStatus.OK])
    with pytest.raises(ValueError, match="reward_error"):
        build_step_batch(scored, multiple=1, pad_token_id=TOK.pad_id)
