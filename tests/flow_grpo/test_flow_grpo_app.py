"""apps/flow_grpo end to end on tiny settings: metrics and pictures, staleness, resume with batches in flight,
settings refused at parse time, Ray and in-process rollouters giving the same run, and learning."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from flow_grpo.cli import parse
from flow_grpo.setup import train
from run_lifecycle import read_metrics

TINY = [
    "--warmup.steps", "60", "--reward.steps", "150", "--model.hidden", "64", "--model.depth", "2",
    "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "4", "--sampler.num_steps", "6",
    "--sampler.window_hi", "4", "--validation.samples_per_class", "3", "--validation.num_steps", "6",
    "--validation.grid_per_class", "2", "--validation.every_steps", "3", "--run.progress", "false",
    "--optim.lr", "1e-3",
]  # fmt: skip


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("flow_cache"))


def _run(cache: str, run_dir: Path, *extra: str, resume: bool = False) -> list[dict[str, object]]:
    argv = [*TINY, "--run.warmup_cache", cache, "--run.dir", str(run_dir), "--pipeline.ray", "false", *extra]
    cfg, resumed = parse([*argv, "--resume"] if resume else argv)
    train(cfg, resume=resumed)
    return read_metrics(run_dir / "metrics.jsonl")


def test_a_run_logs_validation_reward_and_writes_image_grids(cache: str, tmp_path: Path):
    rows = _run(cache, tmp_path / "run", "--run.steps", "6")
    by_step = {int(r["step"]): r for r in rows}
    assert sorted(by_step) == list(range(7))
    for step in (0, 3, 6):
        assert 0 <= float(by_step[step]["val/reward/mean"]) <= 1
        assert (tmp_path / "run" / "plots" / f"samples_{step}.png").stat().st_size > 0
    assert "val/reward/mean" not in by_step[4]
    assert float(by_step[1]["mismatch/max_abs"]) < 1e-6  # synchronous: the recompute is exact
    for name in ("before_after.png", "training.png"):
        assert (tmp_path / "run" / "plots" / name).stat().st_size > 0


def test_with_staleness_k_each_step_trains_a_batch_sampled_k_versions_back(cache: str, tmp_path: Path):
    rows = _run(cache, tmp_path / "run", "--run.steps", "5", "--pipeline.max_staleness", "2")
    lags = [float(r["rollout/version_lag"]) for r in rows if int(r["step"]) > 0]
    assert lags == [0.0, 1.0, 2.0, 2.0, 2.0]
    stale = [r for r in rows if int(r["step"]) > 1]
    assert all("mismatch/max_abs" not in r and "actor/behaviour_weight" in r for r in stale)


def test_a_resume_trains_the_saved_in_flight_batches_like_an_uninterrupted_run(cache: str, tmp_path: Path):
    keys = ("reward/mean", "actor/pg_loss", "actor/grad_norm", "val/reward/mean", "rollout/version_lag")
    common = ("--run.steps", "6", "--pipeline.max_staleness", "1", "--run.checkpoint_every", "3")
    whole = _run(cache, tmp_path / "whole", *common)
    # a run stopped after its step-3 checkpoint: the same directory without what came later
    shutil.copytree(tmp_path / "whole", tmp_path / "split")
    shutil.rmtree(tmp_path / "split" / "checkpoints" / "6")
    pending = list((tmp_path / "split" / "checkpoints" / "3" / "pending").glob("*.npz"))
    assert sorted(p.stem for p in pending) == ["4", "5"]  # k + 1 batches in flight after step 3
    split = _run(cache, tmp_path / "split", *common, resume=True)
    assert [int(r["step"]) for r in split] == list(range(7))
    assert [{k: r.get(k) for k in keys} for r in whole] == [{k: r.get(k) for k in keys} for r in split]


def test_changing_the_data_on_resume_is_refused(cache: str, tmp_path: Path):
    _run(cache, tmp_path / "run", "--run.steps", "2")
    argv = [*TINY, "--run.warmup_cache", cache, "--run.dir", str(tmp_path / "run"), "--pipeline.ray", "false"]
    with pytest.raises(ValueError, match=r"sampler\.noise_level"):
        parse([*argv, "--run.steps", "4", "--sampler.noise_level", "0.9", "--resume"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--sampler.window_hi", "9"], "window_lo, window_hi"),
        (["--sampler.sde_kind", "cps", "--sampler.window_hi", "6"], "CPS window"),
        (["--train.mini_batches_per_step", "100"], "mini_batches_per_step"),
        (["--validation.grid_per_class", "5"], "grid_per_class"),
        (["--pipeline.max_staleness", "-1"], "max_staleness"),
    ],
)
def test_bad_settings_are_refused_at_parse_time(flags: list[str], message: str):
    with pytest.raises(ValueError, match=message):
        parse([*TINY, *flags])


@pytest.mark.slow
def test_a_ray_rollouter_gives_the_same_run_as_an_in_process_one(cache: str, tmp_path: Path):
    keys = ("reward/mean", "actor/pg_loss", "val/reward/mean", "rollout/version_lag")
    temp = f"/tmp/flow_grpo_test_{os.getpid()}"  # short: Ray's socket paths must fit in 107 bytes
    local = _run(cache, tmp_path / "local", "--run.steps", "4", "--pipeline.max_staleness", "1")
    argv = [*TINY, "--run.warmup_cache", cache, "--run.dir", str(tmp_path / "ray"), "--run.steps", "4",
            "--pipeline.max_staleness", "1", "--ray.temp_dir", temp]  # fmt: skip
    cfg, _ = parse(argv)
    assert cfg.pipeline.ray
    train(cfg)
    remote = read_metrics(tmp_path / "ray" / "metrics.jsonl")
    assert [{k: r.get(k) for k in keys} for r in local] == [{k: r.get(k) for k in keys} for r in remote]
    assert not Path(temp).exists()  # the local Ray's temp dir goes with it


@pytest.mark.slow
def test_the_default_recipe_raises_the_validation_reward(tmp_path: Path):
    run = tmp_path / "run"
    argv = ["--run.warmup_cache", str(tmp_path / "cache"), "--run.dir", str(run), "--run.steps", "60",
            "--pipeline.ray", "false", "--run.progress", "false", "--run.plots", "false"]  # fmt: skip
    cfg, _ = parse(argv)
    summary = train(cfg)
    assert summary.base is not None and summary.base <= 0.6  # the base leaves room
    assert summary.final is not None and summary.final - summary.base >= 0.2
