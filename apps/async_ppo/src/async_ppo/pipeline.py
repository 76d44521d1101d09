"""The driver of an async PPO run. Rollouters generate continuously; the driver's loop is:

    for each step:
        groups  <- broker.take(prompts_per_step complete groups, none older than max_staleness)
        outcome <- trainer.train(groups)                      (router replay, per-token versions)
        queue the next step's take and update (the trainer never waits for the driver)
        push the new weights to every rollouter (pause keep | abort), tell the broker the served version
        every k steps: start a validation on the validator's own engine (collected when ready)
        metrics line -> progress bar -> checkpoint (trainer state + ledger of unfinished prompts)

`Pipeline` is the `run_loop.RunApp` that `run_loop.drive` runs (start or resume, the step loop, checkpoints): a
checkpoint's trainer save is queued and the ledger snapshotted before the next step's take and update are queued.

The driver handles object references and metrics only: groups go broker -> trainer (which writes the rollout
dump), weights trainer -> object store -> rollouters and validator (which writes the validation dump).

While it waits, the fleet replaces rollouters that die (their prompts run again); every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError
from ray_session.session import RaySession
from recipes.cli import exit_on_sigterm
from recipes.setup import RunSetup, prepare_run
from recipes.teacher import TeacherRoster, check_roster, ensure_roster
from rl_pipeline.broker import Broker
from rl_pipeline.fleet import PipelineError, RolloutFleet, cause
from rl_pipeline.ledger import LedgerState
from rl_pipeline.placement import Placement
from rl_pipeline.step_rows import StepRows
from rl_pipeline.teacher_pool import TeacherPool, pool_cpus
from rl_pipeline.trainer_actor import TrainerActor, TrainOutcome
from rl_pipeline.validator import Validator
from run_loop import Checkpoint, RunSummary, drive, due

from async_ppo.cli import DEFAULT_RUNS_ROOT
from async_ppo.config import AsyncConfig
from async_ppo.report import REPORT, AsyncDetails
from async_ppo.setup import rollouter_specs, trainer_spec

LEDGER_FILE = "ledger.json"  # in a checkpoint: every prompt started but not trained (queued and in flight)
TRAINER_DIR = "trainer"  # in a checkpoint: the trainer actor's backend state


@dataclass(frozen=True)
class TrainCall:
    """One queued trainer step: the broker's take and the update that consumes it (Ray object references)."""

    step: int
    taken: Any
    result: Any


@dataclass(frozen=True)
class StagedCheckpoint:
    tmp: Path
    saved: Any  # the trainer's save call
    ledger: LedgerState
    version: int  # the trainer's, after the step


class Pipeline:
    def __init__(self, setup: RunSetup, session: RaySession, roster: TeacherRoster | None = None) -> None:
        self.setup = setup
        self.roster = roster  # distillation: the run's teachers (None without)
        self.teachers: TeacherPool | None = None
        self.cfg = setup.cfg
        self.session = session
        self.pending_validations: dict[int, Any] = {}
        self.rows = StepRows(setup.log, next_step=0)
        self.staged: StagedCheckpoint | None = None
        self.call: TrainCall | None = None  # the next step's queued take and update
        self.last_step_end = time.perf_counter()

    # ------------------------------------------------------------------ start
    async def start(self, loaded: Checkpoint | None) -> None:
        """Starts every actor (from the checkpoint's trainer state and ledger when resuming), then queues the first
        step; a fresh run first starts the base model's validation (step 0)."""
        cfg, s = self.cfg, self.setup
        ledger = None
        if loaded:
            ledger = LedgerState.from_json_dict(json.loads((loaded.path / LEDGER_FILE).read_text()))
            self.rows = StepRows(s.log, next_step=loaded.progress.step + 1)
        version = loaded.progress.version if loaded else 0
        self.trainer = (
            ray.remote(TrainerActor)
            .options(**self.session.trainer_options())
            .remote(trainer_spec(s), str(loaded.path / TRAINER_DIR) if loaded else None)
        )
        p = cfg.rollout
        self.broker = (
            ray.remote(Broker)
            .options(**RaySession.light_options())
            .remote(
                p.prompts_per_step,
                cfg.pipeline.max_staleness,
                (1 + cfg.pipeline.max_staleness) * p.prompts_per_step,
                version,
                ledger,
                rerun_stale=cfg.pipeline.staleness_policy == "rerun",
            )
        )
        self.validator = (
            ray.remote(Validator)
            .options(**self.session.validator_options())
            .remote(
                s.checkpoint_dir,
                cfg.task,
                cfg.validation,
                str(s.run.root),
                max_len=s.max_len,
                max_new_tokens=s.max_new_tokens,
                seed=cfg.run.seed,
                reward_timeout_s=cfg.rollout.reward_timeout_s,
                niceness=cfg.ray.helper_niceness,
            )
        )
        self.teachers = self._start_teachers()
        self.fleet = RolloutFleet(
            rollouter_specs(s),
            self.broker,
            self.session.rollouter_options,
            max_restarts=3,
            call_timeout_s=cfg.ray.call_timeout_s,
            teachers=None if self.teachers is None else self.teachers.replicas(),
        )
        weights = self.trainer.publish.remote() if loaded else None
        roles = [a.node_id.remote() for a in (self.trainer, self.broker, self.validator)]
        await self.fleet.start(weights, version)
        await self._record_placement(roles)
        done = loaded.progress.step if loaded else 0
        if not loaded:
            self._validate(0, None)
        self.call = self.submit(done + 1) if done < cfg.run.steps else None
        self.last_step_end = time.perf_counter()

    async def _record_placement(self, roles: list[Any]) -> None:
        """`placement.json`: the node of every role; the fleet adds each rollouter's later moves."""
        trainer, broker, validator = [await ref for ref in roles]
        placement = Placement(self.setup.run.root, trainer, broker, validator)
        for rid, member in sorted(self.fleet.members.items()):
            placement.rollouters[rid] = member.node
        placement.write()
        self.fleet.placement = placement

    def _start_teachers(self) -> TeacherPool | None:
        """Distillation: the teacher pool, in a placement group of its own (the teachers were checked by `_run`)."""
        if self.roster is None:
            return None
        cfg = self.cfg
        return TeacherPool.start(
            cfg.teacher,
            self.roster,
            max_len=self.setup.max_len,
            work_dir=str(self.setup.run.root / "teacher"),
            timeout_s=cfg.ray.startup_timeout_s,
            crash_after_calls=cfg.faults.teacher_crash_after_calls,
        )

    def _validate(self, step: int, weights: Any) -> None:
        self.pending_validations[step] = self.validator.validate.remote(weights, step)
        self.rows.expect_validation(step)

    # ------------------------------------------------------------------ one step
    def submit(self, step: int) -> TrainCall:
        """Queues step `step`'s take and update; the trainer starts as soon as its groups are ready."""
        taken = self.broker.take.remote(self.cfg.rollout.prompts_per_step, step - 1)
        return TrainCall(step, taken, self.trainer.train.remote(step, taken))

    async def step(self, step: int, checkpoint: Path | None) -> dict[str, float]:
        """`run_loop.RunApp.step`: finishes the queued call of `step` (queuing the next), adds its training metrics
        to its line and collects finished validations (after the last step: all). Returns what the bar shows."""
        call = self.call
        if call is None or call.step != step:
            raise RuntimeError(f"Pipeline.step: expected the queued call of step {step}, got {call}")
        metrics, self.call = await self.finish(call, checkpoint)
        self.rows.add_training(step, metrics)
        return metrics | await self.collect_validations(wait_up_to=None if self.call else step)

    async def finish(self, call: TrainCall, checkpoint: Path | None) -> tuple[dict[str, float], TrainCall | None]:
        """Finishes `call`; queues the next step's update before pushing and logging this one, so the
        trainer never waits for the driver. `checkpoint`: the staging folder when this step ends in a checkpoint
        (the trainer's save is queued into it before the next update). Returns the step's metrics and the next call
        (None after the last)."""
        cfg, step = self.cfg, call.step
        try:
            outcome: TrainOutcome = await self.fleet.wait(
                call.result, f"trainer step {step}", cfg.ray.stall_timeout_s, self._describe
            )
        except RayActorError as exc:  # the trainer holds the weights and optimiser: no recovery but --resume
            raise PipelineError(
                f"the trainer actor died during step {step} ({cause(exc)}); resume from the latest "
                "complete checkpoint with --resume"
            ) from exc
        t1 = time.perf_counter()
        push = step % cfg.pipeline.sync_every == 0 or step == cfg.run.steps
        validate = due(step, cfg.validation.every_steps, cfg.run.steps)
        weights = self.trainer.publish.remote() if push or validate else None
        if checkpoint is not None:
            await self._stage_checkpoint(checkpoint, outcome.version)  # queued on the trainer before the next update
        after = self.submit(step + 1) if step < cfg.run.steps else None
        metrics = dict(outcome.metrics)
        if push:
            try:
                metrics["timing/push_s"] = await self.fleet.push(weights, outcome.version, cfg.pipeline.pause_mode)
            except (PipelineError, RayActorError) as exc:
                await self._blame_a_dead_trainer(step, exc)
                raise
            await self.broker.set_served_version.remote(outcome.version)
        if validate:
            self._validate(step, weights)
        metrics |= await self._queue_metrics()
        if self.teachers is not None:
            metrics |= await self.teachers.metrics()
        now = time.perf_counter()
        metrics["timing/sync_s"] = now - t1
        metrics["timing/step_s"] = now - self.last_step_end  # wall time per step, start-up excluded after step 1
        self.last_step_end = now
        metrics["perf/samples_per_s"] = metrics["rollout/num_samples"] / metrics["timing/step_s"]
        metrics["perf/rollout_tokens_per_s"] = metrics["rollout/generated_tokens"] / metrics["timing/step_s"]
        return metrics, after

    async def _blame_a_dead_trainer(self, step: int, exc: BaseException) -> None:
        """A push fails when the weights' owner, the trainer, died (its object-store buckets go with it): say so,
        rather than blame the rollouter that could not read them."""
        try:
            await asyncio.wait_for(self.trainer.get_version.remote(), self.cfg.ray.call_timeout_s)
        except RayActorError as dead:
            raise PipelineError(
                f"the trainer actor died during step {step} ({cause(dead)}); resume from the latest "
                "complete checkpoint with --resume"
            ) from exc

    async def _describe(self) -> str:
        stats = await self.broker.stats.remote()
        return f"Broker: {stats.describe()}; rollouter restarts {self.fleet.restarts}"

    async def _queue_metrics(self) -> dict[str, float]:
        stats = await self.broker.stats.remote()
        return {
            "queue/ready_groups": float(stats.ready),
            "queue/running_prompts": float(stats.running),
            "staleness/excluded_total": float(stats.counters.excluded_stale),
            "fault/rollouter_restarts": float(self.fleet.restarts),
            "fault/prompts_rerun": float(stats.counters.rerun_after_fault),
        }

    # ------------------------------------------------------------------ validation, checkpoints
    async def collect_validations(self, *, wait_up_to: int | None = None) -> dict[str, float]:
        """Adds every finished validation to its step's metrics line; waits for those of steps <= `wait_up_to`.
        Returns the newest collected metrics (for the progress bar)."""
        newest: dict[str, float] = {}
        for step, ref in sorted(self.pending_validations.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if not ready and (wait_up_to is None or step > wait_up_to):
                continue
            result: dict[str, float] = await asyncio.wait_for(ref, self.cfg.ray.call_timeout_s)
            if step == 0 and self.roster is not None and self.roster.default.val_accuracy is not None:
                result = result | {"teacher/val_acc": self.roster.default.val_accuracy}
            self.rows.add_validation(step, result)
            del self.pending_validations[step]
            newest = result
        return newest

    async def _stage_checkpoint(self, tmp: Path, version: int) -> None:
        """The trainer's save is queued and the ledger snapshotted before the next step's take and update, so
        both describe exactly the state after the step."""
        saved = self.trainer.save.remote(str(tmp / TRAINER_DIR))
        self.staged = StagedCheckpoint(tmp, saved, await self.broker.snapshot.remote(), version)

    async def save(self, step: int, folder: Path) -> int:
        """`run_loop.RunApp.save`: completes the checkpoint staged at `step`. The validations of steps <= it are
        awaited first, so every metrics line up to the checkpoint (validation included) is written before `COMPLETE`:
        a kill after it loses nothing that `--resume` would not redo."""
        staged, self.staged = self.staged, None
        if staged is None or staged.tmp != folder:
            raise RuntimeError(f"Pipeline.save: expected a checkpoint staged in {folder}, got {staged}")
        await self.collect_validations(wait_up_to=step)
        if self.rows.next_step <= step:
            raise RuntimeError(f"Pipeline.save: metrics of steps {self.rows.unwritten} are not written yet")
        await asyncio.wait_for(staged.saved, self.cfg.ray.call_timeout_s)
        (folder / LEDGER_FILE).write_text(json.dumps(staged.ledger.to_json_dict(), indent=1) + "\n")
        return staged.version

    async def stop(self) -> None:
        await self.broker.stop.remote()
        await self.fleet.stop()
        await self.validator.close.remote()
        if self.teachers is not None:
            await self.teachers.close()

    def kill(self) -> None:
        """Ends every actor this pipeline made (after an error too), so an attached Ray session stays clean."""
        handles = [getattr(self, name, None) for name in ("trainer", "broker", "validator")]
        handles += [m.handle for m in self.fleet.members.values()] if hasattr(self, "fleet") else []
        for h in handles:
            if h is not None:
                ray.kill(h, no_restart=True)
        if self.teachers is not None:
            self.teachers.kill()

    async def close(self, completed: bool) -> None:
        """`run_loop.RunApp.close`: stops the actors in order after a whole run, then ends every one (after an
        error too), the Ray session and the run directory's lock."""
        try:
            if completed:
                await self.stop()
        finally:
            try:
                self.kill()
                self.session.close()
            finally:
                self.setup.close()


async def run_pipeline(cfg: AsyncConfig, resume: bool) -> RunSummary[AsyncDetails]:
    setup = prepare_run(cfg, resume=resume, runs_root=DEFAULT_RUNS_ROOT)
    try:
        pipe = _open(setup)
    except BaseException:
        setup.close()
        raise
    return await drive(pipe, setup.run, setup.log, cfg.run, REPORT, resume=resume)


def _open(setup: RunSetup) -> Pipeline:
    """The pipeline over a Ray session of its own (the teachers of distillation checked before Ray starts)."""
    cfg: AsyncConfig = setup.cfg  # type: ignore[assignment]
    roster = None
    if cfg.algorithm.kind == "opd":  # built (or read from its cache) and checked before Ray starts
        roster = ensure_roster(cfg.teacher, setup.task, cfg.warmup, Path(cfg.run.warmup_cache).resolve())
        check_roster(cfg.teacher, roster, setup.tokenizer, setup.max_len)
    session = RaySession.open(cfg.ray, extra_cpus=pool_cpus(cfg.teacher, len(roster.items())) if roster else 0.0)
    exit_on_sigterm()  # again: ray.init installs its own SIGTERM handler, which skips every cleanup below
    return Pipeline(setup, session, roster)


def train(cfg: AsyncConfig, *, resume: bool = False) -> RunSummary[AsyncDetails]:
    """Runs (or resumes) a whole async run; returns its summary."""
    return asyncio.run(run_pipeline(cfg, resume))
