"""The staleness bound and metrics, and a prompt ticket's slot (no Ray)."""

from __future__ import annotations

import pytest
from async_pipeline.ledger import PromptTicket
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_core import NOT_SAMPLED, SamplingParams, Trajectory
from trainers.recipe.config import SortTaskConfig
from trainers.rollout.prompts import sample_seed, step_prompts
from trainers.rollout.requests import GroupSpec, group_requests, step_requests
from trainers.staleness import checked_lag, oldest_trainable, staleness_metrics


def _traj(versions: list[int]) -> Trajectory:
    n = len(versions)
    return Trajectory(
        prompt_ids=[1, 2],
        response_ids=list(range(n)),
        response_log_probs=[0.0] * n,
        token_versions=versions,
        loss_mask=[int(v != NOT_SAMPLED) for v in versions],
    )


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=6), min_size=1, max_size=8), st.integers(0, 3))
def test_staleness_metrics_match_a_brute_force_count(versions: list[list[int]], extra: int) -> None:
    policy = max(max(v) for v in versions) + extra
    m = staleness_metrics([_traj(v) for v in versions], policy)
    lags = [policy - min(v) for v in versions]
    tokens = [policy - x for v in versions for x in v]
    assert m["staleness/sample_max"] == max(lags)
    assert m["staleness/sample_mean"] == pytest.approx(sum(lags) / len(lags))
    assert m["staleness/token_mean"] == pytest.approx(sum(tokens) / len(tokens))
    assert m["staleness/multi_version_frac"] == pytest.approx(sum(max(v) > min(v) for v in versions) / len(versions))
    assert m["staleness/version_span_max"] == max(max(v) - min(v) for v in versions)


def test_staleness_skips_unsampled_tokens_and_rejects_versions_from_the_future() -> None:
    m = staleness_metrics([_traj([NOT_SAMPLED, 3, NOT_SAMPLED, 4])], 5)
    assert (m["staleness/sample_max"], m["staleness/token_mean"]) == (2.0, 1.5)
    assert staleness_metrics([_traj([NOT_SAMPLED])], 5) == {}
    with pytest.raises(ValueError, match="newer than the policy"):
        staleness_metrics([_traj([6])], 5)


def test_a_prompt_ticket_expands_to_exactly_the_requests_sync_ppo_makes_for_its_slot() -> None:
    train = SortTaskConfig(train_size=50, val_size=4).build().splits.train
    spec = GroupSpec(prompts_per_step=4, samples_per_prompt=3, temperature=0.7, max_new_tokens=9, seed=5)
    requests = group_requests(train, spec, *PromptTicket(index=9).slot(4))  # slot: step 3, position 1
    assert requests == step_requests(train, spec, 3)[3:6]
    assert [r.request_id for r in requests] == ["s3-p1-r0", "s3-p1-r1", "s3-p1-r2"]
    assert {r.group_id for r in requests} == {"s3-p1"}
    assert all(r.example == step_prompts(train, 3, 4, 5)[1] for r in requests)
    assert [r.params for r in requests] == [
        SamplingParams(max_new_tokens=9, temperature=0.7, seed=sample_seed(5, 3, 1, j)) for j in range(3)
    ]


def test_checked_lag_accepts_the_bound_and_names_the_expected_weights_beyond_it() -> None:
    assert oldest_trainable(7, 2) == 5
    assert [checked_lag(7, v, 2) for v in (5, 6, 7)] == [2, 1, 0]
    with pytest.raises(RuntimeError, match=r"got samples of weights 4, expected weights 5\.\.7"):
        checked_lag(7, 4, 2)
    with pytest.raises(RuntimeError, match=r"got samples of weights 8, expected weights 7\.\.7"):
        checked_lag(7, 8, 0)
