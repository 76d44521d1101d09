"""The run lifecycle every app shares, read top to bottom in `drive`:

    start: a fresh run (the app's step 0) or `--resume` (the latest complete checkpoint; metrics after its step
           dropped, so the resumed steps write them again)
    for each step: the app's step (it writes the step's metrics line) -> progress bar -> checkpoint when due
    close the app; plots; summary

A checkpoint of step s is staged before step s runs, and its folder is handed to the app's `step`: an app whose
next step starts inside `step` (async_ppo queues the next update before it returns) writes the state after step s
there before it does (a step that fails removes that folder again). After the step the app's `save` completes the
folder and the loop commits it (`commit_checkpoint`: `progress.json`, fsynced, `COMPLETE` last).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from run_lifecycle import MetricsLog, Progress, RunDir, read_metrics
from run_lifecycle.checkpoint import Checkpoint, RunProgress, commit_checkpoint, load_latest, stage_checkpoint
from run_lifecycle.schedule import due
from run_lifecycle.summary import D, RunReport, RunSummary, base_score, summarize, write_plots


class RunApp(Protocol):
    """What an app gives the loop: how it starts, one step, and its part of a checkpoint."""

    async def start(self, checkpoint: Checkpoint | None) -> None:
        """None: a fresh run; runs step 0 (the base model's validation, its metrics line). Otherwise continues
        from `checkpoint` (its folder holds what `save` wrote)."""
        ...

    async def step(self, step: int, checkpoint: Path | None) -> Mapping[str, float]:
        """Runs `step` and records its metrics line (now, or once its validation arrives); returns what the
        progress bar shows. `checkpoint`: the empty staging folder when the step ends in a checkpoint; state written
        into it must be the state after this step."""
        ...

    async def save(self, step: int, folder: Path) -> int:
        """Completes the checkpoint of `step` in its staging `folder` (every metrics line up to `step` is written
        before it returns); returns the weight version the saved state holds."""
        ...

    async def close(self, completed: bool) -> None:
        """Releases what the app holds, after an error too; `completed`: every step ran."""
        ...


class LoopSettings(Protocol):
    """The run section's settings the loop reads (the apps' `run` config section has them)."""

    steps: int
    seed: int
    checkpoint_every: int
    keep_checkpoints: int
    progress: bool
    plots: bool


async def _start(app: RunApp, log: MetricsLog, run: RunDir, seed: int, resume: bool) -> RunProgress:
    if not resume:
        await app.start(None)
        return RunProgress(0, 0, seed, None, 0.0)
    checkpoint = load_latest(run)
    await app.start(checkpoint)
    log.truncate_after(checkpoint.progress.step)
    return checkpoint.progress


async def _step(app: RunApp, step: int, staged: Path | None) -> Mapping[str, float]:
    """The app's step; a step that fails leaves no staging folder of its own (its checkpoint was never begun)."""
    try:
        return await app.step(step, staged)
    except BaseException:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
        raise


async def _checkpoint(
    app: RunApp, run: RunDir, step: int, staged: Path, settings: LoopSettings, score: str, elapsed_s: float
) -> None:
    """The app completes the staged folder; with every metrics line up to `step` written, it is committed."""
    version = await app.save(step, staged)
    rows = read_metrics(run.metrics)
    if not rows or rows[-1]["step"] != step:
        got = rows[-1]["step"] if rows else None
        raise RuntimeError(f"checkpoint {step}: expected its metrics line written, got lines up to {got}")
    progress = RunProgress(step, version, settings.seed, base_score(rows, score), elapsed_s)
    commit_checkpoint(run, staged, progress, keep=settings.keep_checkpoints)


async def drive(
    app: RunApp, run: RunDir, log: MetricsLog, settings: LoopSettings, report: RunReport[D], *, resume: bool
) -> RunSummary[D]:
    """Runs (or resumes) the whole run of `app` and closes it; returns the summary."""
    t0 = time.perf_counter()
    completed = False
    try:
        start = await _start(app, log, run, settings.seed, resume)
        bar = Progress(settings.steps, report.progress_fields, initial=start.step, disable=not settings.progress)
        try:
            for step in range(start.step + 1, settings.steps + 1):
                staged = stage_checkpoint(run, step) if due(step, settings.checkpoint_every, settings.steps) else None
                bar.update(step, await _step(app, step, staged))
                if staged is not None:
                    elapsed = start.elapsed_s + time.perf_counter() - t0
                    await _checkpoint(app, run, step, staged, settings, report.score, elapsed)
        finally:
            bar.close()
        wall = start.elapsed_s + time.perf_counter() - t0
        completed = True
    finally:
        await app.close(completed)
    if settings.plots:
        write_plots(run, report)
    return summarize(run, report, seed=settings.seed, wall_s=wall)
