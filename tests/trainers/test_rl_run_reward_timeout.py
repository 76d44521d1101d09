"""A reward function that does not return within `rollout.reward_timeout_s` gives a counted `reward_error` with the
reason, scoring goes on with the next sample, and the abandoned call is stopped where it runs Python code."""

from __future__ import annotations

import threading
import time

import pytest
from moe_models import build_char_tokenizer
from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rl_tasks.reward import RewardFn, RewardResult
from rollout_core import SamplingParams, StopReason, Trajectory, TrajectoryStatus
from trainers.recipe.config import RolloutConfig
from trainers.rollout.rollout import REWARD_TIMEOUT_S, score_all
from trainers.rollout.samples import GenRequest, SampleStatus, ScoredSample

TOK = build_char_tokenizer("0123456789+=")
EXAMPLE = TaskExample("u0", "addition", "1+2=", "3")


def _score(reward_fn: RewardFn, responses: list[str], timeout_s: float) -> list[ScoredSample]:
    requests, trajs = [], []
    for j, text in enumerate(responses):
        requests.append(GenRequest(f"s1-p0-r{j}", "s1-p0", EXAMPLE, 0, j, SamplingParams(max_new_tokens=4)))
        ids = [*TOK.encode(text), TOK.eos_id]
        trajs.append(
            Trajectory(
                prompt_ids=[TOK.bos_id, *TOK.encode(EXAMPLE.prompt)],
                response_ids=ids,
                response_log_probs=[-0.5] * len(ids),
                token_versions=[0] * len(ids),
                loss_mask=[1] * len(ids),
                stop_reason=StopReason.STOP,
                status=TrajectoryStatus.OK,
            )
        )
    return score_all(Renderer(TOK, "plain"), reward_fn, requests, trajs, timeout_s=timeout_s)


def _exact(text: str) -> RewardResult:
    hit = float(text == EXAMPLE.ground_truth)
    return RewardResult(reward=hit, acc=hit, pred=text)


def _reward_threads() -> set[threading.Thread]:
    """Live reward worker threads. Compared as sets: threads other tests abandoned may end at any moment."""
    return {t for t in threading.enumerate() if t.name == "reward-fn" and t.is_alive()}


def test_a_reward_call_blocked_past_the_timeout_is_a_reward_error_and_scoring_goes_on() -> None:
    release = threading.Event()

    def blocking(text: str, example: TaskExample) -> RewardResult:
        if text == "7":
            release.wait(60)  # blocked in C: not interruptible, so it is abandoned
        return _exact(text)

    t0 = time.perf_counter()
    scored = _score(blocking, ["3", "7", "4", "3"], timeout_s=0.3)
    wall = time.perf_counter() - t0
    release.set()
    print(f"injected: one reward call blocked for 60 s (timeout 0.3 s); checked: statuses, reason, wall {wall:.2f} s")
    assert [s.status for s in scored] == [SampleStatus.OK, SampleStatus.REWARD_ERROR, SampleStatus.OK, SampleStatus.OK]
    assert scored[1].scored is not None and scored[1].scored.error is not None
    assert scored[1].scored.error.startswith("TimeoutError: the reward function did not return within 0.3 s")
    assert [s.reward for s in (scored[0], scored[2], scored[3])] == [1.0, 0.0, 1.0]
    assert 0.3 <= wall < 5.0


def test_an_abandoned_pure_python_loop_is_stopped_even_if_it_catches_exception() -> None:
    before = _reward_threads()

    def spinning(text: str, example: TaskExample) -> RewardResult:
        while text == "7":
            try:
                sum(range(1000))
            except Exception:  # a grader that swallows every error still stops: the stop is a BaseException
                continue
        return _exact(text)

    scored = _score(spinning, ["7", "3"], timeout_s=0.2)
    assert [s.status for s in scored] == [SampleStatus.REWARD_ERROR, SampleStatus.OK]
    deadline = time.monotonic() + 10
    while _reward_threads() - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _reward_threads() - before  # the spinning thread ended: it does not eat a core for the rest of the run


def test_a_raising_reward_is_still_a_reward_error_with_its_message() -> None:
    def raising(text: str, example: TaskExample) -> RewardResult:
        raise RuntimeError("grader crashed")

    (scored,) = _score(raising, ["3"], timeout_s=1.0)
    assert scored.status is SampleStatus.REWARD_ERROR and scored.scored is not None
    assert scored.scored.error == "RuntimeError: grader crashed"


def test_system_exit_in_a_reward_function_reaches_the_caller() -> None:
    def exiting(text: str, example: TaskExample) -> RewardResult:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        _score(exiting, ["3"], timeout_s=1.0)


def test_the_timeout_default_is_the_config_default_and_must_be_positive() -> None:
    assert RolloutConfig().reward_timeout_s == REWARD_TIMEOUT_S
    with pytest.raises(ValueError, match=r"rollout.reward_timeout_s: expected > 0, got 0"):
        RolloutConfig(reward_timeout_s=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"score_all: expected timeout_s > 0, got -1"):
        _score(lambda text, example: _exact(text), ["3"], timeout_s=-1)
