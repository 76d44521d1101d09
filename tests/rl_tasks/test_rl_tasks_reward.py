"""score_safely and RewardStats: a raising reward function is an error, never a 0.0 reward."""

from __future__ import annotations

import pytest
from rl_tasks.exact_match import ExactMatchReward
from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardResult, RewardStats, ScoredResponse, ScoreStatus, score_safely

EX = TaskExample("u1", "addition", "1+1=", "2")


def _raises(response_text: str, example: TaskExample) -> RewardResult:
    raise KeyError("boom")


def _returns_float(response_text: str, example: TaskExample) -> RewardResult:
    return 0.0  # type: ignore[return-value]


def test_raising_reward_fn_gives_error_record_with_message() -> None:
    scored = score_safely(_raises, "2", EX)
    assert scored.status is ScoreStatus.ERROR and scored.result is None
    assert scored.error == "KeyError: 'boom'"
    assert (scored.uid, scored.data_source) == ("u1", "addition")


def test_non_reward_result_return_is_an_error() -> None:
    scored = score_safely(_returns_float, "2", EX)
    assert scored.status is ScoreStatus.ERROR and "returned float" in (scored.error or "")


def test_stats_exclude_errors_from_means_and_count_them_per_source() -> None:
    stats = RewardStats()
    stats.add(score_safely(ExactMatchReward(), "2", EX))
    stats.add(score_safely(ExactMatchReward(), "3", EX))
    stats.add(score_safely(_raises, "2", EX))
    assert (stats.num_ok, stats.num_error) == (2, 1)
    assert stats.mean_reward == 0.5 and stats.mean_acc == 0.5
    assert stats.errors_by_source == {"addition": 1} and stats.last_error == "KeyError: 'boom'"
    assert stats.metrics() == {"reward/num_ok": 2.0, "reward/num_error": 1.0, "reward/mean": 0.5, "reward/acc": 0.5}


def test_mean_of_no_ok_response_raises() -> None:
    stats = RewardStats()
    stats.add(score_safely(_raises, "2", EX))
    with pytest.raises(ValueError, match="at least one ok"):
        _ = stats.mean_reward
    assert "reward/mean" not in stats.metrics()


@pytest.mark.parametrize(("reward", "acc"), [(float("nan"), 0.0), (1.0, 1.5), (1.0, -0.1)])
def test_reward_result_rejects_non_finite_reward_and_acc_out_of_range(reward: float, acc: float) -> None:
    with pytest.raises(ValueError, match="RewardResult"):
        RewardResult(reward=reward, acc=acc)


def test_scored_response_refuses_inconsistent_status() -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        ScoredResponse("u", "d", ScoreStatus.OK, result=None)
    with pytest.raises(ValueError, match="inconsistent"):
        ScoredResponse("u", "d", ScoreStatus.ERROR, result=RewardResult(1.0, 1.0), error="x")


def test_task_example_rejects_non_string_ground_truth() -> None:
    with pytest.raises(ValueError, match="ground_truth: expected a str, got int"):
        TaskExample("u", "d", "p", 3)  # type: ignore[arg-type]
