"""`drive` over a scripted app: the order of its calls, checkpoints when due, resume from the latest complete one
giving the metrics of an uninterrupted run, a failing step or a failing save leaving the last complete checkpoint
in charge, and the summary."""

from __future__ import annotations

import asyncio
import errno
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from run_lifecycle import (
    Checkpoint,
    MetricsLog,
    Panel,
    Rows,
    RunDir,
    RunReport,
    RunSummary,
    drive,
    last_of,
    read_metrics,
)


@dataclass(frozen=True)
class Settings:
    steps: int = 5
    seed: int = 3
    checkpoint_every: int = 2
    keep_checkpoints: int = 5
    progress: bool = False
    plots: bool = False


@dataclass(frozen=True)
class LastReward:
    reward: float | None

    def line(self) -> str:
        return f"last reward {self.reward}"


REPORT = RunReport(
    app="scripted",
    score="val/score",
    score_label="val score",
    progress_fields={"reward": "reward"},
    panels=(Panel("reward", ("reward",)),),
    details=lambda rows: LastReward(last_of(rows, "reward")),
)


@dataclass
class ScriptedApp:
    """A run whose state is one number: each step adds the step to it; validations every 2 steps report it."""

    log: MetricsLog
    fail_step: int | None = None
    fail_save: int | None = None
    state: int = 0
    calls: list[str] = field(default_factory=list)
    closed: bool | None = None

    async def start(self, checkpoint: Checkpoint | None) -> None:
        self.calls.append("start" if checkpoint is None else f"resume {checkpoint.progress.step}")
        if checkpoint is None:
            self.log.log(0, {"val/score": 0.5})
        else:
            self.state = json.loads((checkpoint.path / "state.json").read_text())

    async def step(self, step: int, checkpoint: Path | None) -> dict[str, float]:
        self.calls.append(f"step {step}" + ("" if checkpoint is None else " staged"))
        if checkpoint is not None:
            assert checkpoint.is_dir() and list(checkpoint.iterdir()) == []
        if step == self.fail_step:
            raise FloatingPointError(f"step {step}: loss is nan")
        self.state += step
        metrics = {"reward": float(self.state)} | ({"val/score": self.state / 100} if step % 2 == 0 else {})
        self.log.log(step, metrics)
        return metrics

    async def save(self, step: int, folder: Path) -> int:
        self.calls.append(f"save {step}")
        if step == self.fail_save:
            raise OSError(errno.ENOSPC, "No space left on device")
        (folder / "state.json").write_text(json.dumps(self.state))
        return step

    async def close(self, completed: bool) -> None:
        self.closed = completed


def _drive(root: Path, *, resume: bool = False, **kw: object) -> tuple[ScriptedApp, RunSummary[LastReward]]:
    run = RunDir.create(root)
    fields = Settings.__dataclass_fields__
    app = ScriptedApp(MetricsLog(run.metrics), **{k: v for k, v in kw.items() if k not in fields})  # type: ignore[arg-type]
    settings = Settings(**{k: v for k, v in kw.items() if k in fields})  # type: ignore[arg-type]
    return app, asyncio.run(drive(app, run, app.log, settings, REPORT, resume=resume))


def _rows(root: Path) -> Rows:
    return read_metrics(root / "metrics.jsonl")


def test_a_run_steps_stages_checkpoints_before_their_step_and_saves_them_after(tmp_path: Path) -> None:
    app, summary = _drive(tmp_path / "run")
    assert app.calls == [
        "start", "step 1", "step 2 staged", "save 2", "step 3", "step 4 staged", "save 4", "step 5 staged", "save 5",
    ]  # fmt: skip
    run = RunDir(tmp_path / "run")
    assert [int(p.name) for p in run.complete_checkpoints()] == [2, 4, 5] and app.closed is True
    progress = json.loads((run.checkpoint(4) / "progress.json").read_text())
    assert {k: progress[k] for k in ("step", "version", "seed", "base_score")} == {
        "step": 4, "version": 4, "seed": 3, "base_score": 0.5,
    }  # fmt: skip
    assert (summary.steps, summary.base, summary.final, summary.seed) == (5, 0.5, 0.1, 3)
    assert summary.line().startswith("scripted: 5 steps in 0 s (seed 3); val score 0.500 -> 0.100 (-40.0 points); ")
    assert summary.line().endswith(f"last reward 15.0; run dir {tmp_path / 'run'}")


def test_resume_continues_from_the_latest_complete_checkpoint_like_an_uninterrupted_run(tmp_path: Path) -> None:
    _drive(tmp_path / "whole")
    _drive(tmp_path / "split", steps=3)
    run = RunDir(tmp_path / "split")
    (run.checkpoint(3) / "COMPLETE").unlink()  # a crash before the marker: step 2 is the latest complete one
    app, _ = _drive(tmp_path / "split", resume=True)
    assert app.calls[:2] == ["resume 2", "step 3"]
    assert _rows(tmp_path / "split") == _rows(tmp_path / "whole")


def test_a_failing_step_leaves_no_checkpoint_of_it_and_resume_continues_from_the_last(tmp_path: Path) -> None:
    with pytest.raises(FloatingPointError, match="step 4"):
        _drive(tmp_path / "run", fail_step=4)
    run = RunDir(tmp_path / "run")
    assert [int(p.name) for p in run.complete_checkpoints()] == [2] and run.stale_checkpoints() == []
    assert [r["step"] for r in _rows(tmp_path / "run")] == [0, 1, 2, 3]
    app, _ = _drive(tmp_path / "run", resume=True)
    assert app.calls[0] == "resume 2" and [r["step"] for r in _rows(tmp_path / "run")] == list(range(6))


def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint_in_charge(tmp_path: Path) -> None:
    with pytest.raises(OSError) as err:
        _drive(tmp_path / "run", fail_save=4)
    run = RunDir(tmp_path / "run")
    assert err.value.errno == errno.ENOSPC and run.latest_checkpoint() == run.checkpoint(2)
    assert run.stale_checkpoints() == [run.staging(4)]
    app, _ = _drive(tmp_path / "run", resume=True)  # the next start removes the partial folder
    assert app.calls[0] == "resume 2" and run.stale_checkpoints() == []
    assert run.latest_checkpoint() == run.checkpoint(5)


def test_a_save_before_the_steps_metrics_line_is_refused(tmp_path: Path) -> None:
    class Unlogged(ScriptedApp):
        async def step(self, step: int, checkpoint: Path | None) -> dict[str, float]:
            return {"reward": 0.0}

    run = RunDir.create(tmp_path / "run")
    app = Unlogged(MetricsLog(run.metrics))
    with pytest.raises(RuntimeError, match="checkpoint 2: expected its metrics line written, got lines up to 0"):
        asyncio.run(drive(app, run, app.log, Settings(), REPORT, resume=False))
    assert app.closed is False and run.latest_checkpoint() is None


def test_plots_are_written_when_asked(tmp_path: Path) -> None:
    _drive(tmp_path / "run", plots=True)
    assert (tmp_path / "run" / "plots" / "training.png").stat().st_size > 0
