"""Checkpoints of run_lifecycle: progress round trip, resume picks the latest complete one, partial folders ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_lifecycle import RunDir, RunProgress, commit_checkpoint, load_latest, stage_checkpoint
from run_lifecycle.checkpoint import PROGRESS_FILE
from run_lifecycle.run_dir import COMPLETE


def _checkpoint(run: RunDir, step: int, *, keep: int = 5) -> Path:
    folder = stage_checkpoint(run, step)
    (folder / "state.txt").write_text(f"state {step}\n")
    return commit_checkpoint(run, folder, RunProgress(step, step, 7, 0.25, 1.5 * step), keep=keep)


def test_progress_round_trips_through_its_file(tmp_path: Path) -> None:
    progress = RunProgress(step=3, version=3, seed=11, base_score=None, elapsed_s=12.5)
    assert progress.write(tmp_path).name == PROGRESS_FILE
    assert RunProgress.read(tmp_path) == progress


def test_resume_picks_the_latest_complete_checkpoint(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run")
    for step in (2, 4):
        _checkpoint(run, step)
    loaded = load_latest(run)
    assert loaded.path == run.checkpoint(4) and (loaded.path / COMPLETE).exists()
    assert loaded.progress == RunProgress(4, 4, 7, 0.25, 6.0)
    assert (loaded.path / "state.txt").read_text() == "state 4\n"


def test_a_partial_staged_folder_and_an_unmarked_step_folder_are_ignored_then_removed(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run")
    _checkpoint(run, 2)
    (stage_checkpoint(run, 4) / "state.txt").write_text("half")  # a crash before the commit
    RunProgress(6, 6, 7, None, 9.0).write(stage_checkpoint(run, 6))
    run.staging(6).rename(run.checkpoint(6))  # a crash between the rename and COMPLETE
    assert load_latest(run).path == run.checkpoint(2)
    RunDir.create(run.root)  # the next start
    assert run.stale_checkpoints() == [] and load_latest(run).path == run.checkpoint(2)


def test_staging_starts_empty_and_commit_keeps_the_newest(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run")
    (stage_checkpoint(run, 1) / "left-over").write_text("x")
    assert list(stage_checkpoint(run, 1).iterdir()) == []
    for step in (1, 2, 3):
        _checkpoint(run, step, keep=2)
    assert run.complete_checkpoints() == [run.checkpoint(2), run.checkpoint(3)]


def test_resume_without_a_complete_checkpoint_names_the_folder(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run")
    stage_checkpoint(run, 1)
    with pytest.raises(ValueError, match=r"--resume: expected a complete checkpoint under .*checkpoints, got none"):
        load_latest(run)
