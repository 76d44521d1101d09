"""The actors of an async run, started together and ended together: the trainer, the broker, the validator, the
teacher pool (distillation) and the rollouter fleet, with `placement.json` recording where each runs.

The driver handles object references and metrics only: groups go broker -> trainer (which writes the rollout
dump), weights trainer -> object store -> rollouters and validator (which writes the validation dump). Every wait
has a deadline; while the driver waits, the fleet replaces rollouters that die (their prompts run again). The
trainer holds the weights and the optimiser: when it dies the run ends with an error that says to `--resume`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError
from trainers.distillation.teacher import TeacherRoster
from trainers.recipe.setup import RunSetup

from async_pipeline.broker import Broker
from async_pipeline.config import FaultConfig, PipelineConfig
from async_pipeline.fleet import PipelineError, RolloutFleet, cause
from async_pipeline.placement import Placement
from async_pipeline.ray_session.config import RayConfig
from async_pipeline.ray_session.session import RaySession
from async_pipeline.specs import rollouter_specs, trainer_spec
from async_pipeline.staged_checkpoint import read_ledger, trainer_state_dir
from async_pipeline.teacher_pool import TeacherPool
from async_pipeline.trainer_actor import TrainerActor, TrainOutcome
from async_pipeline.validator import Validator

MAX_ROLLOUTER_RESTARTS = 3


@dataclass(frozen=True)
class TrainCall:
    """One queued trainer step: the broker's take and the update that consumes it (Ray object references)."""

    step: int
    taken: Any
    result: Any


def _trainer_died(step: int, exc: BaseException) -> PipelineError:
    return PipelineError(
        f"the trainer actor died during step {step} ({cause(exc)}); resume from the latest complete checkpoint "
        "with --resume"
    )


def _start_teachers(
    setup: RunSetup, roster: TeacherRoster | None, ray_cfg: RayConfig, faults: FaultConfig
) -> TeacherPool | None:
    """Distillation: the teacher pool, in a placement group of its own (the roster is checked before Ray starts)."""
    if roster is None:
        return None
    return TeacherPool.start(
        setup.cfg.teacher,
        roster,
        max_len=setup.max_len,
        vocab_size=setup.vocab_size,
        work_dir=str(setup.run.root / "teacher"),
        timeout_s=ray_cfg.startup_timeout_s,
        crash_after_calls=faults.teacher_crash_after_calls,
    )


def _start_roles(
    setup: RunSetup,
    session: RaySession,
    pipeline: PipelineConfig,
    ray_cfg: RayConfig,
    checkpoint: Path | None,
    version: int,
) -> tuple[Any, Any, Any]:
    """The trainer, the broker and the validator (actor handles; Ray starts them in the background)."""
    cfg, p = setup.cfg, setup.cfg.rollout
    resume_from = str(trainer_state_dir(checkpoint)) if checkpoint else None
    trainer = (
        ray.remote(TrainerActor).options(**session.trainer_options()).remote(trainer_spec(setup, pipeline), resume_from)
    )
    broker = (
        ray.remote(Broker)
        .options(**RaySession.light_options())
        .remote(
            p.prompts_per_step,
            pipeline.max_staleness,
            (1 + pipeline.max_staleness) * p.prompts_per_step,
            version,
            read_ledger(checkpoint) if checkpoint else None,
            rerun_stale=pipeline.staleness_policy == "rerun",
        )
    )
    validator = (
        ray.remote(Validator)
        .options(**session.validator_options())
        .remote(
            setup.checkpoint_dir,
            cfg.task,
            cfg.model,
            cfg.validation,
            str(setup.run.root),
            vocab_size=setup.vocab_size,
            max_len=setup.max_len,
            max_new_tokens=setup.max_new_tokens,
            seed=cfg.run.seed,
            reward_timeout_s=p.reward_timeout_s,
            niceness=ray_cfg.helper_niceness,
        )
    )
    return trainer, broker, validator


@dataclass
class Actors:
    trainer: Any
    broker: Any
    validator: Any
    fleet: RolloutFleet
    teachers: TeacherPool | None
    prompts_per_step: int
    call_timeout_s: float

    @classmethod
    async def start(
        cls,
        setup: RunSetup,
        session: RaySession,
        pipeline: PipelineConfig,
        ray_cfg: RayConfig,
        faults: FaultConfig,
        roster: TeacherRoster | None,
        checkpoint: Path | None,
        version: int,
    ) -> Actors:
        """Starts every actor (from `checkpoint`'s trainer state and ledger when resuming, at weight `version`) and
        records their placement. `roster`: the teachers of distillation (None without). Ends those it started
        when one fails to start."""
        trainer, broker, validator = _start_roles(setup, session, pipeline, ray_cfg, checkpoint, version)
        try:
            teachers = _start_teachers(setup, roster, ray_cfg, faults)
        except BaseException:
            for handle in (trainer, broker, validator):
                ray.kill(handle, no_restart=True)
            raise
        fleet = RolloutFleet(
            rollouter_specs(setup, pipeline, ray_cfg, faults),
            broker,
            session.rollouter_options,
            max_restarts=MAX_ROLLOUTER_RESTARTS,
            call_timeout_s=ray_cfg.call_timeout_s,
            teachers=None if teachers is None else teachers.replicas(),
        )
        p = setup.cfg.rollout.prompts_per_step
        actors = cls(trainer, broker, validator, fleet, teachers, p, ray_cfg.call_timeout_s)
        try:
            weights = trainer.publish.remote() if checkpoint else None
            roles = [a.node_id.remote() for a in (trainer, broker, validator)]
            await fleet.start(weights, version)
            await actors._record_placement(setup.run.root, roles)
        except BaseException:
            actors.kill()
            raise
        return actors

    async def _record_placement(self, root: Path, roles: list[Any]) -> None:
        """`placement.json`: the node of every role; the fleet adds each rollouter's later moves."""
        trainer, broker, validator = [await ref for ref in roles]
        placement = Placement(root, trainer, broker, validator)
        for rid, member in sorted(self.fleet.members.items()):
            placement.rollouters[rid] = member.node
        placement.write()
        self.fleet.placement = placement

    def submit(self, step: int) -> TrainCall:
        """Queues step `step`'s take and update; the trainer starts as soon as its groups are ready."""
        taken = self.broker.take.remote(self.prompts_per_step, step - 1)
        return TrainCall(step, taken, self.trainer.train.remote(step, taken))

    async def outcome(self, call: TrainCall, stall_timeout_s: float) -> TrainOutcome:
        """The update of `call`; PipelineError when no result comes within `stall_timeout_s` or the trainer died."""
        try:
            return await self.fleet.wait(call.result, f"trainer step {call.step}", stall_timeout_s, self._describe)
        except RayActorError as exc:  # the trainer holds the weights and optimiser: no recovery but --resume
            raise _trainer_died(call.step, exc) from exc

    def publish(self) -> Any:
        """The trainer's current weights (an ObjectRef of its WeightHandle), queued on the trainer."""
        return self.trainer.publish.remote()

    async def push(self, weights: Any, version: int, pause_mode: str, step: int) -> float:
        """Every rollouter serves `version`, and the broker knows it, when this returns; returns the slowest push
        in seconds. A push fails when the weights' owner, the trainer, died (its object-store buckets go with it):
        the error then says so, rather than blame the rollouter that could not read them."""
        try:
            push_s = await self.fleet.push(weights, version, pause_mode)
        except (PipelineError, RayActorError) as exc:
            try:
                await asyncio.wait_for(self.trainer.get_version.remote(), self.call_timeout_s)
            except RayActorError as dead:
                raise _trainer_died(step, dead) from exc
            raise
        await self.broker.set_served_version.remote(version)
        return push_s

    async def _describe(self) -> str:
        stats = await self.broker.stats.remote()
        return f"Broker: {stats.describe()}; rollouter restarts {self.fleet.restarts}"

    async def metrics(self) -> dict[str, float]:
        """The queue's depth, the staleness exclusions and the faults so far; the teacher pool's totals."""
        stats = await self.broker.stats.remote()
        out = {
            "queue/ready_groups": float(stats.ready),
            "queue/running_prompts": float(stats.running),
            "staleness/excluded_total": float(stats.counters.excluded_stale),
            "fault/rollouter_restarts": float(self.fleet.restarts),
            "fault/prompts_rerun": float(stats.counters.rerun_after_fault),
        }
        if self.teachers is not None:
            out |= await self.teachers.metrics()
        return out

    async def stop(self) -> None:
        """Stops the actors in order after a whole run: the broker first, so no rollouter's lease blocks."""
        await self.broker.stop.remote()
        await self.fleet.stop()
        await self.validator.close.remote()
        if self.teachers is not None:
            await self.teachers.close()

    def kill(self) -> None:
        """Ends every actor (after an error too), so an attached Ray session stays clean."""
        for handle in (self.trainer, self.broker, self.validator, *(m.handle for m in self.fleet.members.values())):
            ray.kill(handle, no_restart=True)
        if self.teachers is not None:
            self.teachers.kill()
