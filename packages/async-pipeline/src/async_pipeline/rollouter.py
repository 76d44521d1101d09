"""Rollouter: one engine, generating groups for the broker's prompts until told to stop.

Runs as a Ray actor (asyncio): `run` is the long-lived loop; `push_weights` interleaves with it. Each leased
prompt becomes one task that generates its `samples_per_prompt` responses (resuming aborted calls: partial
rollout; a task with a tool runs its agent loop), scores them (with distillation, a teacher replica scores them
too) and hands the group to the broker (which may make it
wait: back-pressure). Responses of a group run concurrently with every other group's; the engine batches them all.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from rollout_core import PauseMode, RolloutEngine
from trainers.distillation.stream import attach_teacher
from trainers.distillation.teacher import DEFAULT_TEACHER
from trainers.recipe.config import ModelConfig, RolloutConfig, TaskConfig
from trainers.recipe.setup import run_renderer
from trainers.rollout.engine_site import EngineSite
from trainers.rollout.requests import GroupSpec, group_requests
from trainers.rollout.rollout import generate_all, score_all
from trainers.rollout.samples import SampleStatus, ScoredSample
from trainers.weight_sync import WeightHandle

from async_pipeline.group import FinishedGroup
from async_pipeline.ledger import PromptTicket
from async_pipeline.ray_session.node import NodeAware
from async_pipeline.ray_session.weight_sync import RayWeightSync


@dataclass(frozen=True)
class RollouterSpec:
    """Everything a rollouter needs; `crash_after_groups` N > 0 injects a fault (os._exit when its N-th group is
    finished, before it is delivered)."""

    rollouter_id: int  # the slot: its resource bundle (a replacement keeps it)
    owner_id: int  # holds its leases in the broker; unique per incarnation (a dead one's late result is refused)
    site: EngineSite
    rollout: RolloutConfig
    group: GroupSpec
    task: TaskConfig
    model: ModelConfig  # the run's tokenizer: `trainers.recipe.setup.run_tokenizer`
    max_inflight_prompts: int
    partial_rollout: bool
    torch_threads: int = 1
    crash_after_groups: int = 0
    niceness: int = 0  # added to the actor process's niceness (os.nice) at start
    push_error_at_version: int = 0  # injected fault: push_weights raises for this version


@dataclass(frozen=True)
class RollouterStats:
    rollouter_id: int
    groups: int
    generated_tokens: int
    weight_version: int


class Rollouter(NodeAware):
    def __init__(self, spec: RollouterSpec, broker: Any, teachers: Mapping[str, tuple[Any, ...]] | None = None) -> None:
        """`broker`: a Ray actor handle of `Broker` (or, in-process, any object whose methods return awaitables
        through `.remote`); `teachers`: the distillation teachers' replicas by roster key
        (`async_pipeline.teacher_pool.TeacherPool.replicas`), None without distillation."""
        torch.set_num_threads(spec.torch_threads)
        os.nice(spec.niceness)
        self.spec = spec
        self.broker = broker
        self.teachers = dict(teachers or {})
        self.task = spec.task.build()
        self.renderer = run_renderer(spec.model, spec.site.checkpoint_dir, self.task)
        self.sync = RayWeightSync()
        self.engine: RolloutEngine | None = None
        self._stopping = False
        self._groups = 0
        self._tokens = 0

    async def start(self, weights: WeightHandle | None) -> int:
        """Builds the engine and loads `weights` (None: serve the base checkpoint as version 0)."""
        self.engine = await self.spec.rollout.engine.build(self.spec.site)
        if weights is not None:
            try:
                await self._load(weights, "abort")
            except BaseException:
                await self.close()
                raise
        return self.engine.weight_version

    def _engine(self) -> RolloutEngine:
        if self.engine is None:
            raise RuntimeError(f"rollouter {self.spec.rollouter_id}: expected start() before use, got no engine")
        return self.engine

    async def _load(self, handle: WeightHandle, mode: PauseMode) -> None:
        weights = await self.sync.fetch_async(handle)  # awaited: generation streams keep flowing meanwhile
        await self._engine().push(weights, handle.version, mode)

    async def run(self) -> RollouterStats:
        """Leases prompts and generates their groups until `stop`; raises on anything but an engine error
        (an engine error marks its sample `error`, counted by the trainer)."""
        tasks: set[asyncio.Task[None]] = set()
        try:
            while not self._stopping:
                free = self.spec.max_inflight_prompts - len(tasks)
                if free <= 0:
                    done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                    _reraise(done)
                    continue
                tickets: list[PromptTicket] = await self.broker.lease.remote(self.spec.owner_id, free)
                if not tickets:  # a lease waits until one prompt may start, so none means the broker stopped
                    break
                tasks |= {asyncio.create_task(self._group(t)) for t in tickets}
                done = {t for t in tasks if t.done()}
                tasks -= done
                _reraise(done)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return self.stats()

    async def _group(self, ticket: PromptTicket) -> None:
        t0 = time.perf_counter()
        step, position = ticket.slot(self.spec.group.prompts_per_step)
        requests = group_requests(self.task.splits.train, self.spec.group, step, position)
        trajectories = await generate_all(
            self._engine(),
            self.renderer,
            requests,
            tool=self.task.tool,
            partial_rollout=self.spec.partial_rollout,
            max_resumes=self.spec.rollout.max_resumes,
        )
        # off the event loop: a slow or hung reward (bounded by rollout.reward_timeout_s) never stalls other groups
        scored = await asyncio.to_thread(
            score_all,
            self.renderer,
            self.task.reward_fn,
            requests,
            trajectories,
            timeout_s=self.spec.rollout.reward_timeout_s,
        )
        if self.teachers:
            scored = await self._distill(ticket.index, scored)
        group = FinishedGroup(ticket.index, tuple(scored), self.spec.owner_id, time.perf_counter() - t0)
        if self.spec.crash_after_groups and self._groups + 1 >= self.spec.crash_after_groups:
            # injected fault: the process dies as on a segfault or an OOM kill, holding this finished group's lease
            # (dying after delivering it would hold none when every other group had been delivered meanwhile)
            os._exit(17)
        await self.broker.complete.remote(group)
        self._groups += 1
        self._tokens += group.generated_tokens

    async def _distill(self, index: int, scored: list[ScoredSample]) -> list[ScoredSample]:
        """The group's ok samples with the scores of its data source's teacher (the default one when the source names
        none), from replica `index % replicas` (a restarted replica runs the call again; the group waits for it)."""
        ok = [s for s in scored if s.status is SampleStatus.OK]
        if not ok:
            return scored
        source = ok[0].request.example.data_source  # one prompt per group: one data source
        replicas = self.teachers[source if source in self.teachers else DEFAULT_TEACHER]
        teacher = replicas[index % len(replicas)]
        scores = await teacher.score.remote(
            [(list(s.trajectory.prompt_ids), list(s.trajectory.response_ids)) for s in ok]
        )
        return attach_teacher(scored, {s.uid: t for s, t in zip(ok, scores, strict=True)})

    async def push_weights(self, handle: WeightHandle, mode: PauseMode) -> float:
        """Serves `handle.version` from now on; in-flight responses continue (keep) or resume (abort). Returns
        seconds."""
        t0 = time.perf_counter()
        if handle.version == self.spec.push_error_at_version:
            raise RuntimeError(
                f"injected fault: rollouter {self.spec.rollouter_id} refuses weight version {handle.version}"
            )
        await self._load(handle, mode)
        return time.perf_counter() - t0

    def stats(self) -> RollouterStats:
        version = self.engine.weight_version if self.engine is not None else -1
        return RollouterStats(self.spec.rollouter_id, self._groups, self._tokens, version)

    async def stop(self) -> RollouterStats:
        self._stopping = True
        return self.stats()

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.close()
            self.engine = None


def _reraise(done: set[asyncio.Task[None]]) -> None:
    """Raises the first error among `done`, having read every one (asyncio logs an error nobody read)."""
    errors = [t.exception() for t in done if not t.cancelled()]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
