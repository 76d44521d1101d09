"""The pieces of the async app that need no Ray: command line, config checks, staleness metrics, group requests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from async_ppo.cli import parse
from async_ppo.config import AsyncConfig
from async_ppo.ledger import PromptTicket
from async_ppo.staleness import staleness_metrics
from hypothesis import given, settings
from hypothesis import strategies as st
from recipes.config import SortTaskConfig
from recipes.prompts import sample_seed, step_prompts
from recipes.requests import GroupSpec, group_requests, step_requests
from rollout_core import NOT_SAMPLED, SamplingParams, Trajectory

APP = Path(__file__).resolve().parents[2] / "apps" / "async_ppo"


def test_help_lists_the_pipeline_sections_without_importing_torch_or_ray() -> None:
    probe = "import sys, async_ppo.cli; assert not {'torch', 'ray'} & set(sys.modules), 'heavy import before parsing'"
    subprocess.run([sys.executable, "-c", probe], check=True)
    out = subprocess.run([sys.executable, str(APP), "--help"], check=True, capture_output=True, text=True).stdout
    for flag in ("--pipeline.max_staleness", "--pipeline.pause_mode", "--ray.address", "--rollout.engine", "--resume"):
        assert flag in out


def test_a_new_run_without_run_dir_is_given_its_directory_when_it_starts() -> None:
    cfg, resume = parse([])
    assert not resume and cfg.run.dir == ""  # allocated (unique, under runs/async_ppo) by the run, not by parsing


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--pipeline.max_staleness", "-1"], "max_staleness >= 0"),
        (["--pipeline.sync_every", "3", "--pipeline.max_staleness", "1"], "sync_every 3 > max_staleness"),
        (["--pipeline.pause_mode", "wait"], "pause_mode"),
        (["--ray.num_rollouters", "0"], "num_rollouters >= 1"),
        (["--algorithm.kind", "decoupled", "--algorithm.old_log_probs", "rollout"], "not a key of algorithm.kind"),
        (["--rollout.engine", "tgi"], "rollout.engine.kind: expected one of"),
    ],
)
def test_bad_settings_are_rejected_with_got_and_expected(tmp_path: Path, flags: list[str], match: str) -> None:
    with pytest.raises((ValueError, SystemExit), match=match):
        parse([*flags, "--run.dir", str(tmp_path)])


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


def test_rollout_compile_decode_flag_reaches_every_rollouters_engine_spec(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    from async_ppo.setup import rollouter_specs
    from recipes.setup import prepare_run

    flags = ("--rollout.engine.compile_decode", "true", "--ray.num_rollouters", "2")
    specs = rollouter_specs(prepare_run(tiny_config(tmp_path / "run", *flags)))
    assert [s.rollout.engine.compile_decode for s in specs] == [True, True]
    assert [s.site.index for s in specs] == [0, 1]
    assert not rollouter_specs(prepare_run(tiny_config(tmp_path / "default")))[0].rollout.engine.compile_decode
