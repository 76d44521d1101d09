"""The async pipeline end to end on real Ray actors (one Ray session for the module): staleness bound, routing
rows, per-token versions, rollouter crash recovery, push errors. (Equivalence with sync_ppo at max_staleness 0:
tests/apps.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from async_pipeline.async_ppo.config import AsyncConfig
from async_pipeline.async_ppo.pipeline import train
from async_pipeline.fleet import PipelineError
from async_pipeline.ledger import LedgerState
from async_pipeline.ray_session.config import RayConfig
from async_pipeline.ray_session.session import LocalRay
from async_ppo_helpers import trained_prompt_indices
from rollout_core import TrajectoryStatus
from run_lifecycle import read_metrics
from trainers.dumps import read_dump

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def ray_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One loopback-only Ray for the module, its temp dir removed afterwards (as the app's own)."""
    local = LocalRay.start(
        RayConfig(temp_dir=f"/tmp/apt_{id(tmp_path_factory) % 10**6}"), num_cpus=2, log_to_driver=False
    )
    yield
    local.stop()


def _ledger(run_dir: Path, step: int) -> LedgerState:
    return LedgerState.from_json_dict(json.loads((run_dir / "checkpoints" / str(step) / "ledger.json").read_text()))


def _assert_each_prompt_trained_once(run_dir: Path, steps: int, p: int) -> None:
    trained = trained_prompt_indices(run_dir, p, range(1, steps + 1))
    assert len(trained) == len(set(trained)) == steps * p
    held = _ledger(run_dir, steps)
    assert sorted(trained + held.held) == list(range(held.cursor))


def test_async_run_bounds_staleness_and_every_trained_response_has_versions_and_all_routing_rows(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    run = tmp_path / "run"
    # rerun: a group older than the bound is never trained (the default, correct, trains it corrected: below)
    flags = ["--run.steps", "4", "--pipeline.max_staleness", "1", "--pipeline.staleness_policy", "rerun"]
    summary = train(tiny_config(run, *flags))
    rows = read_metrics(run / "metrics.jsonl")
    train_rows = [r for r in rows if "timing/train_s" in r]
    assert [r["step"] for r in train_rows] == [1, 2, 3, 4]
    assert {r["step"] for r in rows if "val/greedy_acc" in r} == {0, 2, 4}
    for step in range(1, 5):
        records = read_dump(run / "rollouts" / f"{step}.jsonl")
        assert len(records) == 4 * 3
        for r in records:
            assert len(r.token_versions) == len(r.response_ids)
            if r.status is TrajectoryStatus.OK:
                assert step - 2 <= r.min_version <= r.max_version <= step - 1  # max_staleness 1
                assert r.routing is not None and len(r.routing) == len(r.prompt_ids) + len(r.response_ids) - 1
                assert r.routing.missing(len(r.prompt_ids) + len(r.response_ids)) == []
    assert max(r["staleness/sample_max"] for r in train_rows) == 1.0  # the rollouter runs one step ahead
    assert all(r["mismatch/replay/tokens"] == 0 or r["mismatch/replay/abs_diff_max"] < 1e-4 for r in train_rows)
    _assert_each_prompt_trained_once(run, 4, 4)
    assert summary.final is not None and summary.base is not None
    placement = json.loads((run / "placement.json").read_text())  # one machine: every role on its one node
    roles = [placement["trainer"], placement["broker"], placement["validator"], *placement["rollouters"].values()]
    assert len(set(roles)) == 1
    assert list(placement["rollouters"]) == ["0"] and placement["moves"] == []


def test_a_crashed_rollouter_is_replaced_and_its_prompts_run_again_exactly_once(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    run = tmp_path / "run"
    train(tiny_config(run, "--run.steps", "4", "--faults.rollouter_crash_after_groups", "3"))
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "timing/train_s" in r]
    assert rows[-1]["fault/rollouter_restarts"] == 1.0
    assert rows[-1]["fault/prompts_rerun"] >= 1.0  # it died holding leased prompts
    _assert_each_prompt_trained_once(run, 4, 4)
    moves = json.loads((run / "placement.json").read_text())["moves"]
    assert [(m["rollouter"], m["from"] == m["to"]) for m in moves] == [(0, True)]  # replaced on the same node


def test_a_failing_weight_push_is_an_error_naming_the_rollouter_and_version(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    with pytest.raises(PipelineError, match=r"weight push v2 to rollouter 0 failed.*injected fault"):
        train(tiny_config(tmp_path / "run", "--run.steps", "3", "--faults.push_error_at_version", "2"))


@pytest.mark.parametrize("mode", ["keep", "abort"])
def test_responses_in_flight_at_a_push_span_two_versions_with_each_row_from_the_pass_that_sampled_its_token(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig], mode: str
) -> None:
    # A response spans a push only if it is in flight, with a token sampled before the push and one after. So the
    # rollouter must be the bottleneck (unthrottled, a step's 24 responses took 0.1 s and training one 0.12 s: no push
    # landed mid-response in 3 of 4 runs), and more than one response must be in flight: responses are 1-13 tokens,
    # and with one slot a push that lands while a 1-token response runs spans none (CI saw 0 spanning in 4 steps, and
    # so did a run under a CPU hog, where training took 4 s a step). With 4 slots and 40 ms per decode step,
    # generating a step takes ~2 s here; each push after step 2 lands with 4 responses in flight.
    run = tmp_path / mode
    train(tiny_config(run, "--run.steps", "4", "--rollout.engine.slots", "4", "--rollout.engine.step_delay_ms", "40",
                      "--rollout.samples_per_prompt", "6", "--pipeline.pause_mode", mode,
                      "--validation.every_steps", "4"))  # fmt: skip
    spanning = 0
    for step in range(1, 5):
        for r in read_dump(run / "rollouts" / f"{step}.jsonl"):
            if r.status is not TrajectoryStatus.OK:
                continue
            spanning += r.max_version > r.min_version
            n = len(r.prompt_ids) + len(r.response_ids)
            assert r.routing is not None and len(r.routing) == n - 1 and r.routing.missing(n) == []
            row_versions = r.routing.versions
            predicting = row_versions[len(r.prompt_ids) - 1 : n - 1]  # row i predicts token i + 1
            assert predicting.tolist() == r.token_versions  # the native engine returns rows of aborted calls
    assert spanning > 0
    _assert_each_prompt_trained_once(run, 4, 4)
    _assert_tokens_beyond_the_bound_were_all_corrected(run, 4, max_staleness=1)


def _assert_tokens_beyond_the_bound_were_all_corrected(run: Path, steps: int, max_staleness: int) -> None:
    """Under the default staleness_policy correct: the tokens of each step's dump sampled by a version below the
    bound (trainer version step - 1, minus max_staleness) are exactly those the trainer counted as corrected."""
    rows = {r["step"]: r for r in read_metrics(run / "metrics.jsonl") if "timing/train_s" in r}
    assert all(rows[step]["staleness/excluded_groups"] == 0 for step in range(1, steps + 1))
    for step in range(1, steps + 1):
        floor = step - 1 - max_staleness
        ok = [r for r in read_dump(run / "rollouts" / f"{step}.jsonl") if r.status is TrajectoryStatus.OK]
        beyond = sum(v < floor for r in ok for v in r.token_versions)
        counted = rows[step]["staleness/beyond_bound_token_frac"] * rows[step]["actor/loss_tokens"]
        assert beyond == pytest.approx(counted, abs=1e-6), f"step {step}: {beyond} tokens beyond the bound"
