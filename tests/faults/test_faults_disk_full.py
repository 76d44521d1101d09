"""A disk that fills up during a checkpoint: the last complete checkpoint stays in charge, `--resume` continues from
it, and the partial folder is removed when the run next starts. Once with the file-size limit of the kernel
(RLIMIT_FSIZE, in a subprocess: a real failing write in the app's checkpoint writer), once inside a whole run
(sync_ppo) with ENOSPC injected into the tensors writer halfway through the file."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from faults_apps import app_flags, resume_flags
from faults_tally import FaultTally
from run_lifecycle import RunDir, RunProgress, read_metrics
from run_lifecycle import driver as run_driver
from safetensors import SafetensorError
from sync_ppo.cli import parse
from trainers.backend import BackendState
from trainers.backend import state as state_module
from trainers.sync_ppo import trainer as sync_trainer

pytestmark = pytest.mark.faults

WRITER = textwrap.dedent("""
    import resource, sys, torch
    from pathlib import Path
    from run_lifecycle import RunDir
    from run_lifecycle import RunProgress, commit_checkpoint, stage_checkpoint
    from trainers.backend import BackendState

    def save(state: BackendState, progress: RunProgress) -> None:  # what sync_ppo's checkpoint hook writes
        folder = stage_checkpoint(run, progress.step)
        state.save(folder)
        commit_checkpoint(run, folder, progress, keep=2)

    run = RunDir.create(Path(sys.argv[1]))
    save(BackendState({"model.w": torch.ones(16)}, version=1), RunProgress(1, 1, 0, None, 1.0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 18, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    big = BackendState({"model.w": torch.ones(1 << 20)}, version=2)  # 4 MiB > the 256 KiB the disk has left
    try:
        save(big, RunProgress(2, 2, 0, None, 2.0))
    except OSError as exc:
        print(f"errno {exc.errno}: {exc}")
        sys.exit(3)
""")


def test_a_real_failing_write_keeps_the_previous_checkpoint_and_the_next_start_cleans_up(
    tmp_path: Path, tally: FaultTally
) -> None:
    root = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    tally.schedule(faults=1)
    tally.note(f"injected: RLIMIT_FSIZE 256 KiB while writing a 4 MiB checkpoint; the writer: {done.stdout.strip()}")
    tally.check(done.returncode == 3, f"writer exit {done.returncode}: {done.stdout}{done.stderr[-2000:]}")
    tally.check(done.stdout.startswith(f"errno {errno.EFBIG}:"), f"expected EFBIG, got {done.stdout}")
    run = RunDir(root)
    tally.check(run.latest_checkpoint() == run.checkpoint(1), f"latest is {run.latest_checkpoint()}")
    tally.check(run.stale_checkpoints() == [run.staging(2)], f"debris {run.stale_checkpoints()}")
    RunDir.create(root)  # the next start
    tally.check(run.stale_checkpoints() == [], "the partial folder survived the next start")
    state, progress = BackendState.load(run.checkpoint(1)), RunProgress.read(run.checkpoint(1))
    tally.check(state.version == progress.step == 1 and state.tensors["model.w"].numel() == 16, "checkpoint 1")


def test_a_full_disk_mid_checkpoint_in_a_run_then_resume_from_the_last_complete_one(
    tmp_path: Path, warmup_cache: Path, monkeypatch: pytest.MonkeyPatch, tally: FaultTally
) -> None:
    real_save = state_module.save_file

    def fills_up(tensors: dict[str, object], path: str) -> None:
        if Path(path).parent.name != ".tmp-4":
            return real_save(tensors, path)
        real_save(tensors, path)
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[: len(data) // 2])  # what fitted before the disk was full
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(state_module, "save_file", fills_up)
    run_dir = tmp_path / "run"
    cfg, _ = parse(app_flags(run_dir, warmup_cache, "--run.steps", "4", "--run.checkpoint_every", "2"))
    with pytest.raises(OSError) as err:
        sync_trainer.train(cfg)
    tally.schedule(faults=1)
    tally.note(f"injected: ENOSPC halfway through the step-4 checkpoint's tensors; the run stopped with: {err.value}")
    run = RunDir(run_dir)
    tally.check(err.value.errno == errno.ENOSPC, f"errno {err.value.errno}")
    tally.check(run.latest_checkpoint() == run.checkpoint(2), f"latest is {run.latest_checkpoint()}")
    tally.check(run.stale_checkpoints() == [run.staging(4)], f"debris {run.stale_checkpoints()}")
    tally.check(not (run.staging(4) / "COMPLETE").exists() and not run.checkpoint(4).exists(), "step 4 looks done")

    monkeypatch.undo()
    loaded: list[tuple[Path, list[Path]]] = []
    real_load = run_driver.load_latest

    def spy_load(at: RunDir) -> object:
        checkpoint = real_load(at)
        loaded.append((checkpoint.path, run.stale_checkpoints()))
        return checkpoint

    monkeypatch.setattr(run_driver, "load_latest", spy_load)
    cfg, resume = parse(resume_flags(run_dir))
    sync_trainer.train(cfg, resume=resume)
    tally.check(loaded == [(run.checkpoint(2), [])], f"resume loaded {loaded} (path, debris at that moment)")
    steps = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")]
    tally.check(steps == [0, 1, 2, 3, 4], f"metrics rows {steps}")
    tally.check(run.latest_checkpoint() == run.checkpoint(4) and run.stale_checkpoints() == [], "final checkpoint")
