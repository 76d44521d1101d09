"""TeacherPool: the distillation teachers' replicas (`teacher.replicas` per teacher of the run's roster: the default
one and one per `teacher.sources` entry), Ray actors in a placement group of their own (never in the trainer's or a
rollouter's bundle), each serving `score` on its engine (`teacher.engine`: the native scorer or a vLLM server the
replica starts and owns).

A rollouter scores each group as soon as it has generated it, on replica `group index % replicas` of the group's
data source's teacher, so scoring runs while other groups still generate. A replica whose process dies is restarted
by Ray (`teacher.max_restarts`) and the calls it had pending are run again on the new incarnation
(`max_task_retries=-1`): a group waits for its scores, it is never handed to the trainer without them.
`fault/teacher_restarts` counts the replicas running a restarted incarnation (a replica restarted twice counts once).
"""

from __future__ import annotations

import asyncio
import os
import warnings
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from rollout_core.teacher_engine import TeacherEngine, TeacherSite
from rollout_core.teacher_scores import TeacherScores
from trainers.distillation.teacher import TeacherConfig, TeacherRoster, teacher_site


@dataclass(frozen=True)
class TeacherStats:
    """Since the replica's current incarnation started: scoring calls, tokens scored, busy seconds."""

    calls: int
    tokens: int
    busy_s: float
    restarted: bool


class TeacherActor:
    """One replica (an async actor): its engine (`teacher.engine`) starts on the first call, in every incarnation.
    `crash_after_calls` > 0 injects a fault: the first incarnation exits (os._exit) when that many calls have
    arrived, before answering the last one (which Ray then runs again on the restarted replica)."""

    def __init__(self, cfg: TeacherConfig, site: TeacherSite, torch_threads: int, crash_after_calls: int = 0) -> None:
        import torch

        torch.set_num_threads(torch_threads)
        self.cfg, self.site = cfg, site
        self.engine: TeacherEngine | None = None
        self._starting = asyncio.Lock()
        with warnings.catch_warnings():  # Ray's own property reads its deprecated `actor_id` (ray 2.60)
            warnings.simplefilter("ignore", DeprecationWarning)
            self.restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        self.crash_after_calls = 0 if self.restarted else crash_after_calls
        self.calls = 0

    async def _engine(self) -> TeacherEngine:
        async with self._starting:
            if self.engine is None:
                self.engine = await self.cfg.engine.build(self.site)
        return self.engine

    async def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[TeacherScores]:
        """`(prompt_ids, response_ids)` pairs -> one TeacherScores each, in order."""
        self.calls += 1
        if self.crash_after_calls and self.calls >= self.crash_after_calls:
            os._exit(19)  # injected fault: the process dies as on an OOM kill, with this call pending
        return await (await self._engine()).score(sequences)

    def stats(self) -> TeacherStats:
        busy, tokens = (0.0, 0) if self.engine is None else (self.engine.busy_s, self.engine.tokens)
        return TeacherStats(self.calls, tokens, busy, self.restarted)

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.close()
            self.engine = None


def pool_cpus(cfg: TeacherConfig, teachers: int) -> float:
    """CPUs the pool reserves for `teachers` teachers."""
    return cfg.replicas * cfg.cpus * teachers


class TeacherPool:
    def __init__(self, group: PlacementGroup, by_key: dict[str, list[Any]]) -> None:
        """`by_key`: each teacher's replica handles, by roster key (`trainers.distillation.teacher.DEFAULT_TEACHER`
        and the named data sources)."""
        self.group, self.by_key = group, by_key
        self.handles = [h for hs in by_key.values() for h in hs]
        self._killed = False

    @classmethod
    def start(
        cls,
        cfg: TeacherConfig,
        roster: TeacherRoster,
        *,
        max_len: int,
        vocab_size: int,
        work_dir: str,
        timeout_s: float,
        crash_after_calls: int = 0,
    ) -> TeacherPool:
        """Reserves `replicas` bundles of `cpus` CPUs per teacher, then starts one replica in each; raises
        RuntimeError naming what is missing when the cluster cannot hold the pool within `timeout_s`.
        `crash_after_calls` applies to the default teacher's replica 0."""
        teachers = roster.items()
        bundles = [{"CPU": cfg.cpus} for _ in range(cfg.replicas * len(teachers))]
        group = placement_group(bundles, strategy="PACK")
        try:
            ray.get(group.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            raise RuntimeError(
                f"teacher: Ray could not reserve the teacher pool {bundles} (teacher.replicas {cfg.replicas} x "
                f"teacher.cpus {cfg.cpus} x {len(teachers)} teachers) within {timeout_s:.0f} s; the cluster has "
                f"{ray.cluster_resources()}, available {ray.available_resources()}. Lower teacher.replicas / "
                "teacher.cpus or add nodes"
            ) from None
        by_key: dict[str, list[Any]] = {}
        for t, (key, teacher) in enumerate(teachers):
            for i in range(cfg.replicas):
                bundle = t * cfg.replicas + i
                strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle)
                options = {
                    "num_cpus": cfg.cpus,
                    "scheduling_strategy": strategy,
                    "max_restarts": cfg.max_restarts,
                    "max_task_retries": -1,
                }
                work = f"{work_dir}/{roster.label(key)}/replica-{i}"
                site = teacher_site(cfg, teacher, max_len, work, i, vocab_size=vocab_size)
                by_key.setdefault(key, []).append(
                    ray.remote(TeacherActor)
                    .options(**options)
                    .remote(cfg, site, cfg.torch_threads, crash_after_calls if bundle == 0 else 0)
                )
        return cls(group, by_key)

    def replicas(self) -> dict[str, tuple[Any, ...]]:
        """What a rollouter is given: each teacher's replicas, by roster key."""
        return {k: tuple(hs) for k, hs in self.by_key.items()}

    async def metrics(self) -> dict[str, float]:
        """The pool's totals over every teacher's replicas' current incarnations: busy seconds, tokens per busy
        second, calls (in all and per teacher: `teacher/calls/<teacher>`), and how many replicas were restarted."""
        by_key = {k: [await h.stats.remote() for h in hs] for k, hs in self.by_key.items()}
        stats = [s for ss in by_key.values() for s in ss]
        busy, tokens = sum(s.busy_s for s in stats), sum(s.tokens for s in stats)
        return {
            "teacher/busy_s": busy,
            "teacher/tokens_per_s": tokens / busy if busy > 0 else 0.0,
            "teacher/calls": float(sum(s.calls for s in stats)),
            **{f"teacher/calls/{TeacherRoster.label(k)}": float(sum(s.calls for s in ss)) for k, ss in by_key.items()},
            "fault/teacher_restarts": float(sum(s.restarted for s in stats)),
        }

    async def close(self) -> None:
        """Stops every replica's engine (a vLLM server with it), then the actors and their placement group."""
        try:
            await asyncio.gather(*(h.close.remote() for h in self.handles), return_exceptions=True)
        finally:
            self.kill()

    def kill(self) -> None:
        """Ends the actors and frees their placement group (once; after an error too)."""
        if self._killed:
            return
        self._killed = True
        for h in self.handles:
            ray.kill(h, no_restart=True)
        remove_placement_group(self.group)
