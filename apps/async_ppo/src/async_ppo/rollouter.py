"""Rollouter: one engine, generating GRPO groups for the broker's prompts until told to stop.

Runs as a Ray actor (asyncio): `run` is the long-lived loop; `push_weights` interleaves with it. Each leased
prompt becomes one task that generates its `samples_per_prompt` responses (resuming aborted calls: partial
rollout), scores them and hands the group to the broker (which may make it wait: back-pressure). Responses
of a group run concurrently with every other group's; the engine batches them all.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from moe_models import load_tokenizer
from rl_tasks.toy_task import build_splits, toy_reward_fn
from sync_ppo.config import TaskConfig
from sync_ppo.rollout import generate_all, score_all

from async_ppo.group import FinishedGroup, GroupSpec, group_requests
from async_ppo.ledger import PromptTicket
from async_ppo.rollout_engine import EngineSpec, PauseMode, RolloutEngine, build_rollout_engine


@dataclass(frozen=True)
class RollouterSpec:
    """Everything a rollouter needs; `crash_after_groups` > 0 injects a fault (os._exit after that many groups)."""

    rollouter_id: int  # the slot: its resource bundle (a replacement keeps it)
    owner_id: int  # holds its leases in the broker; unique per incarnation (a dead one's late result is refused)
    engine: EngineSpec
    group: GroupSpec
    task: TaskConfig
    max_inflight_prompts: int
    partial_rollout: bool
    max_resumes: int
    crash_after_groups: int = 0
    niceness: int = 0  # added to the actor process's niceness (os.nice) at start
    push_error_at_version: int = 0  # injected fault: push_weights raises for this version


@dataclass(frozen=True)
class RollouterStats:
    rollouter_id: int
    groups: int
    generated_tokens: int
    weight_version: int


class Rollouter:
    def __init__(self, spec: RollouterSpec, broker: Any) -> None:
        """`broker`: a Ray actor handle of `Broker` (or, in-process, any object whose methods return awaitables
        through `.remote`)."""
        torch.set_num_threads(spec.engine.torch_threads)
        os.nice(spec.niceness)
        self.spec = spec
        self.broker = broker
        self.tokenizer = load_tokenizer(spec.engine.checkpoint_dir)
        self.train = build_splits(spec.task).train
        self.reward_fn = toy_reward_fn(spec.task)
        self.engine: RolloutEngine | None = None
        self._stopping = False
        self._groups = 0
        self._tokens = 0

    async def start(self, state: dict[str, np.ndarray] | None, version: int) -> int:
        """Builds the engine and loads `state` as `version` (None: serve the base checkpoint as version 0)."""
        self.engine = await build_rollout_engine(self.spec.engine)
        if state is not None:
            try:
                await self.engine.push(state, version, "abort")
            except BaseException:
                await self.close()
                raise
        return self.engine.engine.weight_version

    def _engine(self) -> RolloutEngine:
        if self.engine is None:
            raise RuntimeError(f"rollouter {self.spec.rollouter_id}: expected start() before use, got no engine")
        return self.engine

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
        requests = group_requests(ticket, self.train, self.spec.group)
        engine = self._engine().engine
        trajectories = await generate_all(engine, self.tokenizer, requests, partial_rollout=self.spec.partial_rollout,
                                          max_resumes=self.spec.max_resumes)  # fmt: skip
        scored = score_all(self.tokenizer, self.reward_fn, requests, trajectories)
        wall = time.perf_counter() - t0
        group = FinishedGroup(ticket.index, tuple(scored), self.spec.owner_id, wall)
        await self.broker.complete.remote(group)
        self._groups += 1
        self._tokens += group.generated_tokens
        if self.spec.crash_after_groups and self._groups >= self.spec.crash_after_groups:
            os._exit(17)  # injected fault: the process dies as on a segfault or an OOM kill

    async def push_weights(self, state: dict[str, np.ndarray], version: int, mode: PauseMode) -> float:
        """Serves `version` from now on; in-flight responses continue (keep) or resume (abort). Returns seconds."""
        t0 = time.perf_counter()
        if version == self.spec.push_error_at_version:
            raise RuntimeError(f"injected fault: rollouter {self.spec.rollouter_id} refuses weight version {version}")
        await self._engine().push(state, version, mode)
        return time.perf_counter() - t0

    def stats(self) -> RollouterStats:
        version = self.engine.engine.weight_version if self.engine is not None else -1
        return RollouterStats(self.spec.rollouter_id, self._groups, self._tokens, version)

    async def stop(self) -> RollouterStats:
        self._stopping = True
        return self.stats()

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.close()
            self.engine = None


def _reraise(done: set[asyncio.Task[None]]) -> None:
    for t in done:
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
