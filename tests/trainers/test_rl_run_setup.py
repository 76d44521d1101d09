"""Preparing a run checks what it can before touching the run directory (the context against the model's
positions, singleton groups; the tokenizer's checks: test_rl_run_checkpoint_checks.py), claims a unique, locked
directory, and on resume keeps the original config.toml and records the overrides in resumes.jsonl."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
from run_lifecycle import from_dict, to_toml
from run_lifecycle.claim import claim_run_dir
from run_lifecycle.resume import RESUMES_FILE
from run_lifecycle.run_section import RunConfig
from trainers.recipe.config import RecipeConfig, RolloutConfig, SortTaskConfig
from trainers.recipe.setup import check_run, warn_singleton_groups


def _cfg(run_dir: str = "", **rollout: object) -> RecipeConfig:
    return RecipeConfig(
        run=RunConfig(dir=run_dir),
        task=SortTaskConfig(train_size=50, val_size=4),
        rollout=RolloutConfig(**rollout),  # type: ignore[arg-type]
    )


def test_a_response_budget_beyond_the_models_positions_fails_before_the_run_directory_exists(tmp_path: Path) -> None:
    cfg = _cfg(str(tmp_path / "run"), max_new_tokens=3000)
    with pytest.raises(ValueError, match=r"max_position_embeddings 2048"):
        check_run(cfg)
    assert not (tmp_path / "run").exists()
    plan = check_run(_cfg())
    assert plan.max_new_tokens == 13 and plan.max_len > plan.max_new_tokens  # 12 digits + EOS; then the prompt


def test_one_sample_per_prompt_with_a_group_estimator_warns() -> None:
    with pytest.warns(UserWarning, match="single sample"):
        warn_singleton_groups(_cfg(samples_per_prompt=1))


def test_new_runs_get_unique_locked_directories_and_write_their_config(tmp_path: Path) -> None:
    first, lock1 = claim_run_dir(_cfg(), resume=False, runs_root=tmp_path)
    second, lock2 = claim_run_dir(_cfg(), resume=False, runs_root=tmp_path)
    try:
        assert first.root != second.root and first.root.parent == second.root.parent == tmp_path.resolve()
        assert tomllib.loads(first.config.read_text())["run"]["dir"] == str(first.root)
        with pytest.raises(ValueError, match="no other process using it"):
            claim_run_dir(_cfg(str(first.root)), resume=True, runs_root=tmp_path)
    finally:
        lock1.release()
        lock2.release()


def test_a_resume_keeps_the_original_config_and_appends_its_overrides(tmp_path: Path) -> None:
    run, lock = claim_run_dir(_cfg(str(tmp_path / "run")), resume=False, runs_root=tmp_path)
    lock.release()
    original = run.config.read_text()
    resumed = dataclasses.replace(_cfg(str(run.root)), run=RunConfig(dir=str(run.root), steps=90))
    _, lock = claim_run_dir(resumed, resume=True, runs_root=tmp_path)
    lock.release()
    assert run.config.read_text() == original
    (entry,) = [json.loads(line) for line in (run.root / RESUMES_FILE).read_text().splitlines()]
    assert entry["changes"] == {"run.steps": {"from": 60, "to": 90}} and entry["from_step"] is None
    assert from_dict(RecipeConfig, tomllib.loads(original)).run.steps == 60
    with pytest.raises(ValueError, match="without a run"):
        claim_run_dir(_cfg(str(run.root)), resume=False, runs_root=tmp_path)
    assert to_toml(_cfg()) != original  # the record names its own directory
