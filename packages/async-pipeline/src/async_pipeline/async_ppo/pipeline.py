"""The driver of an async PPO run. Rollouters generate continuously; the driver's loop is:

    for each step:
        groups  <- broker.take(prompts_per_step complete groups, none older than max_staleness)
        outcome <- trainer.train(groups)                      (router replay, per-token versions)
        queue the next step's take and update (the trainer never waits for the driver)
        push the new weights to every rollouter (pause keep | abort), tell the broker the served version
        every k steps: start a validation on the validator's own engine (collected when ready)
        metrics line -> progress bar -> checkpoint (trainer state + ledger of unfinished prompts)

`Pipeline` is the `run_lifecycle.RunApp` that `run_lifecycle.drive` runs (start or resume, the step loop, checkpoints)
over the actors of `async_pipeline.actors`: a checkpoint's trainer save is queued and the ledger snapshotted before the
next step's take and update are queued; the validations of steps <= a checkpoint are collected before it commits.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from run_lifecycle import Checkpoint, RunSummary, drive, due
from run_lifecycle.sigterm import exit_on_sigterm
from trainers.distillation.teacher import TeacherRoster, check_roster, ensure_roster
from trainers.recipe.setup import RunSetup, prepare_run

from async_pipeline.actors import Actors, TrainCall
from async_pipeline.async_ppo.config import AsyncConfig
from async_pipeline.async_ppo.report import REPORT, AsyncDetails
from async_pipeline.ray_session.session import RaySession
from async_pipeline.staged_checkpoint import StagedCheckpoint
from async_pipeline.step_clock import StepClock
from async_pipeline.step_rows import StepRows
from async_pipeline.teacher_pool import pool_cpus
from async_pipeline.validations import PendingValidations


class Pipeline:
    def __init__(self, setup: RunSetup, cfg: AsyncConfig, session: RaySession, roster: TeacherRoster | None) -> None:
        self.setup, self.cfg, self.session = setup, cfg, session
        self.roster = roster  # distillation: the run's teachers (None without)
        self.actors: Actors | None = None
        self.staged: StagedCheckpoint | None = None
        self.call: TrainCall | None = None  # the next step's queued take and update
        self.clock = StepClock()

    async def start(self, loaded: Checkpoint | None) -> None:
        """`run_lifecycle.RunApp.start`: starts every actor (from the checkpoint when resuming), then queues the first
        step; a fresh run first starts the base model's validation (step 0)."""
        cfg = self.cfg
        done, version = (loaded.progress.step, loaded.progress.version) if loaded else (0, 0)
        checkpoint = loaded.path if loaded else None
        a = await Actors.start(
            self.setup, self.session, cfg.pipeline, cfg.ray, cfg.faults, self.roster, checkpoint, version
        )
        self.actors = a
        self.rows = StepRows(self.setup.log, next_step=done + 1 if loaded else 0)
        teacher_acc = self.roster.default.val_accuracy if self.roster else None
        base_extra = {"teacher/val_acc": teacher_acc} if teacher_acc is not None else {}
        self.validations = PendingValidations(a.validator, self.rows, cfg.ray.call_timeout_s, base_extra)
        if not loaded:
            self.validations.start(0, None)
        self.call = a.submit(done + 1) if done < cfg.run.steps else None
        self.clock.restart()

    @property
    def running(self) -> Actors:
        if self.actors is None:
            raise RuntimeError("Pipeline: expected its actors started (start() first), got none")
        return self.actors

    async def step(self, step: int, checkpoint: Path | None) -> dict[str, float]:
        """`run_lifecycle.RunApp.step`: finishes the queued call of `step` (queuing the next), adds its training metrics
        to its line and collects finished validations (after the last step: all). Returns what the bar shows."""
        call = self.call
        if call is None or call.step != step:
            raise RuntimeError(f"Pipeline.step: expected the queued call of step {step}, got {call}")
        metrics, self.call = await self.finish(call, checkpoint)
        self.rows.add_training(step, metrics)
        return metrics | await self.validations.collect(wait_up_to=None if self.call else step)

    async def finish(self, call: TrainCall, checkpoint: Path | None) -> tuple[dict[str, float], TrainCall | None]:
        """Finishes `call`; stages the checkpoint (when `checkpoint`, the staging folder, is given) and queues the
        next step's update before pushing and logging this one, so the trainer never waits for the driver.
        Returns the step's metrics and the next call (None after the last)."""
        cfg, step, a = self.cfg, call.step, self.running
        outcome = await a.outcome(call, cfg.ray.stall_timeout_s)
        t1 = time.perf_counter()
        push = step % cfg.pipeline.sync_every == 0 or step == cfg.run.steps
        validate = due(step, cfg.validation.every_steps, cfg.run.steps)
        weights = a.publish() if push or validate else None
        if checkpoint is not None:  # queued on the trainer before the next update
            final = step == cfg.run.steps  # the run's last checkpoint also holds the policy as an HF folder
            self.staged = await StagedCheckpoint.stage(a.trainer, a.broker, checkpoint, outcome.version, final=final)
        after = a.submit(step + 1) if step < cfg.run.steps else None
        metrics = dict(outcome.metrics)
        if push:
            metrics["timing/push_s"] = await a.push(weights, outcome.version, cfg.pipeline.pause_mode, step)
        if validate:
            self.validations.start(step, weights)
        metrics |= await a.metrics()
        self.clock.end_step(metrics, t1)
        return metrics, after

    async def save(self, step: int, folder: Path) -> int:
        """`run_lifecycle.RunApp.save`: completes the checkpoint staged at `step`. The validations of steps <= it are
        awaited first, so every metrics line up to the checkpoint (validation included) is written before `COMPLETE`:
        a kill after it loses nothing that `--resume` would not redo."""
        staged, self.staged = self.staged, None
        if staged is None or staged.folder != folder:
            raise RuntimeError(f"Pipeline.save: expected a checkpoint staged in {folder}, got {staged}")
        await self.validations.collect(wait_up_to=step)
        if self.rows.next_step <= step:
            raise RuntimeError(f"Pipeline.save: metrics of steps {self.rows.unwritten} are not written yet")
        return await staged.complete(self.cfg.ray.call_timeout_s)

    async def close(self, completed: bool) -> None:
        """`run_lifecycle.RunApp.close`: stops the actors in order after a whole run, then ends every one (after an
        error too), the Ray session and the run directory's lock."""
        try:
            if completed and self.actors is not None:
                await self.actors.stop()
        finally:
            try:
                if self.actors is not None:
                    self.actors.kill()
                self.session.close()
            finally:
                self.setup.close()


async def run_pipeline(cfg: AsyncConfig, resume: bool) -> RunSummary[AsyncDetails]:
    setup = prepare_run(cfg, resume=resume, runs_root=cfg.RUNS_ROOT)
    try:
        pipe = _open(setup, cfg)
    except BaseException:
        setup.close()
        raise
    return await drive(pipe, setup.run, setup.log, cfg.run, REPORT, resume=resume)


def _open(setup: RunSetup, cfg: AsyncConfig) -> Pipeline:
    """The pipeline over a Ray session of its own (the teachers of distillation checked before Ray starts)."""
    roster = None
    if cfg.algorithm.kind == "opd":  # built (or read from its cache) and checked before Ray starts
        roster = ensure_roster(cfg.teacher, setup.task, cfg.warmup, cfg.model, Path(cfg.run.warmup_cache).resolve())
        check_roster(cfg.teacher, roster, setup.tokenizer, setup.max_len)
    session = RaySession.open(cfg.ray, extra_cpus=pool_cpus(cfg.teacher, len(roster.items())) if roster else 0.0)
    exit_on_sigterm()  # again: ray.init installs its own SIGTERM handler, which skips every cleanup below
    return Pipeline(setup, cfg, session, roster)


def train(cfg: AsyncConfig, *, resume: bool = False) -> RunSummary[AsyncDetails]:
    """Runs (or resumes) a whole async run; returns its summary."""
    return asyncio.run(run_pipeline(cfg, resume))
