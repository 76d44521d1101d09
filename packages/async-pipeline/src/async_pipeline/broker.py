"""Broker: the prompt ledger plus the bounded queue of finished groups, with the waiting that couples them.

Runs as one Ray actor (an asyncio actor: its methods interleave but never run in parallel, so every ledger
transition is atomic). Rollouters `lease` prompts and `complete` groups; the trainer side `take`s a step's
groups. Back-pressure: `complete` waits while `capacity` groups are ready and unconsumed; `lease` waits while
admission (max_staleness) allows no new prompt. `stop` wakes every waiter. Generic over the group type: it reads
only what `async_pipeline.group.Group` names (index, rollouter, oldest version), so any app's finished groups (token
responses, images) go through the same broker.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Generic, TypeVar

from async_pipeline.group import Group
from async_pipeline.ledger import LedgerCounters, LedgerState, PromptLedger, PromptTicket, TicketStatus
from async_pipeline.ray_session.node import NodeAware


@dataclass(frozen=True)
class BrokerStats:
    """A point-in-time view for metrics and error messages."""

    served_version: int
    cursor: int
    ready: int
    running: int
    pending: int
    counters: LedgerCounters

    def describe(self) -> str:
        return (
            f"served version {self.served_version}, cursor {self.cursor}, ready {self.ready}, running "
            f"{self.running}, waiting to run again {self.pending}, counters {vars(self.counters)}"
        )


G = TypeVar("G", bound=Group)


class Broker(NodeAware, Generic[G]):
    """`rerun_stale`: a ready group older than the staleness bound runs again (`pipeline.staleness_policy rerun`);
    else every finished group is trained, its stale tokens corrected by the trainer."""

    def __init__(
        self,
        prompts_per_step: int,
        max_staleness: int,
        capacity: int,
        served_version: int,
        state: LedgerState | None = None,
        *,
        rerun_stale: bool = True,
    ) -> None:
        if capacity < prompts_per_step:
            raise ValueError(f"Broker: expected capacity >= prompts_per_step ({prompts_per_step}), got {capacity}")
        self.ledger: PromptLedger[G] = PromptLedger(prompts_per_step, max_staleness, state)
        self.rerun_stale = rerun_stale
        self.capacity = capacity
        self.served_version = served_version
        self.stopped = False
        self._changed = asyncio.Condition()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def lease(self, rollouter: int, n: int) -> list[PromptTicket]:
        """Waits until at least one prompt may start (or `stop`: then returns [])."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.stopped or self.ledger.leasable(self.served_version) > 0)
            if self.stopped:
                return []
            return self.ledger.lease(rollouter, n, self.served_version)

    async def complete(self, group: G) -> bool:
        """Waits while the queue is full; False when the ticket was released meanwhile (result discarded)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.stopped or self.ledger.num_ready < self.capacity)
            if self.stopped:
                return False
            accepted = self.ledger.complete(group.index, group.rollouter, group, group.min_version)
            self._changed.notify_all()
            return accepted

    async def take(self, n: int, trainer_version: int) -> tuple[list[G], list[G]]:
        """The `n` lowest-index ready groups; with `rerun_stale`, only those whose oldest token is at most
        max_staleness versions older than `trainer_version`, the too-stale ones sent to run again. Returns (groups,
        the groups excluded meanwhile: their prompts run again, they are never trained). `n` must be in [1,
        capacity]: more could never be ready at once (`complete` blocks at capacity)."""
        if not 1 <= n <= self.capacity:
            raise ValueError(f"Broker.take: expected 1 <= n <= capacity ({self.capacity}), got {n}")
        excluded: list[G] = []
        async with self._changed:
            while True:
                if self.rerun_stale and (stale := self.ledger.stale_ready(trainer_version)):
                    excluded += [g for _, g in stale]
                    self.ledger.exclude_stale(trainer_version)
                    self._changed.notify_all()
                if self.ledger.num_ready >= n or self.stopped:
                    break
                await self._changed.wait()
            if self.stopped:
                raise RuntimeError(f"Broker.take: stopped while waiting for {n} groups ({self.stats().describe()})")
            taken = self.ledger.take(n)
            self._changed.notify_all()
            return [g for _, g in taken], excluded

    async def set_served_version(self, version: int) -> None:
        if version < self.served_version:
            raise ValueError(f"set_served_version: expected >= {self.served_version}, got {version}")
        self.served_version = version
        await self._notify()

    async def release(self, rollouter: int) -> list[int]:
        """A dead rollouter's leased prompts run again, before any new prompt."""
        lost = self.ledger.release(rollouter)
        await self._notify()
        return lost

    def snapshot(self) -> LedgerState:
        return self.ledger.snapshot()

    def stats(self) -> BrokerStats:
        return BrokerStats(
            served_version=self.served_version,
            cursor=self.ledger.cursor,
            ready=self.ledger.num_ready,
            running=self.ledger.count(TicketStatus.RUNNING),
            pending=self.ledger.count(TicketStatus.PENDING),
            counters=LedgerCounters(**vars(self.ledger.counters)),
        )

    async def stop(self) -> None:
        self.stopped = True
        await self._notify()
