"""Checkpoint durability: everything staged is fsynced before `COMPLETE`, `COMPLETE` and the folders after it; what
a crash or a full disk leaves mid-checkpoint is never loaded and is removed when the run next starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from run_lifecycle import RunDir
from run_lifecycle import run_dir as run_dir_module


def _stage(run: RunDir, step: int) -> Path:
    staged = run.staging(step)
    (staged / "trainer").mkdir(parents=True)
    (staged / "trainer" / "backend.safetensors").write_bytes(b"x" * 100)
    (staged / "ledger.json").write_text("{}")
    return staged


def test_commit_fsyncs_every_staged_file_and_folder_before_complete_then_complete_and_the_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunDir.create(tmp_path / "run")
    staged = _stage(run, 4)
    synced: list[tuple[str, bool]] = []  # (path, COMPLETE existed at that moment)
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), (run.checkpoint(4) / "COMPLETE").exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    final = run.commit_checkpoint(staged, 4, keep=2)
    before = [p for p, complete in synced if not complete]
    staged_entries = {
        str(staged),
        str(staged / "trainer"),
        str(staged / "trainer" / "backend.safetensors"),
        str(staged / "ledger.json"),
    }
    assert staged_entries <= set(before)  # every file and folder, under its staging name, before the marker
    assert before[-1] == str(run.checkpoints)  # the rename made durable, still before the marker
    assert [p for p, complete in synced if complete] == [str(final / "COMPLETE"), str(final)]
    assert run.latest_checkpoint() == final


def test_a_failed_write_leaves_the_previous_checkpoint_in_charge_and_the_next_start_removes_the_debris(
    tmp_path: Path,
) -> None:
    run = RunDir.create(tmp_path / "run")
    run.commit_checkpoint(_stage(run, 2), 2, keep=2)
    _stage(run, 4)  # a staging folder the disk filled up in (never committed)
    run.checkpoint(6).mkdir()  # renamed but killed before COMPLETE was written
    (run.checkpoint(6) / "ledger.json").write_text("{}")
    assert run.latest_checkpoint() == run.checkpoint(2)
    assert run.stale_checkpoints() == [run.staging(4), run.checkpoint(6)]

    again = RunDir.create(run.root)  # the next start (or --resume)
    assert not run.staging(4).exists() and not run.checkpoint(6).exists()
    assert again.latest_checkpoint() == run.checkpoint(2) and again.stale_checkpoints() == []
    assert (run.checkpoint(2) / "ledger.json").read_text() == "{}"


def test_commit_refuses_a_missing_staging_folder(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run")
    with pytest.raises(ValueError, match=r"expected a staged checkpoint folder, got no folder .*\.tmp-3"):
        run.commit_checkpoint(run.staging(3), 3, keep=1)


def test_an_old_checkpoint_interrupted_while_deleted_is_never_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunDir.create(tmp_path / "run")
    run.commit_checkpoint(_stage(run, 1), 1, keep=1)

    real_rmtree = run_dir_module.shutil.rmtree

    def crash(path: Path, **kw: bool) -> None:
        if Path(path) == run.checkpoint(1):
            raise OSError(f"killed while deleting {path}")
        real_rmtree(path, **kw)

    monkeypatch.setattr(run_dir_module.shutil, "rmtree", crash)
    with pytest.raises(OSError, match="killed while deleting"):
        run.commit_checkpoint(_stage(run, 2), 2, keep=1)
    monkeypatch.undo()
    assert run.complete_checkpoints() == [run.checkpoint(2)]  # step 1 lost its marker before any file went
    assert run.stale_checkpoints() == [run.checkpoint(1)]
    RunDir.create(run.root)
    assert not run.checkpoint(1).exists()
