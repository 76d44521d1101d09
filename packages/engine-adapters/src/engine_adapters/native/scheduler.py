"""Scheduler: which requests own KV-cache slots and which run in the next step (continuous batching)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine_adapters.native.request import Request, RequestStatus


@dataclass
class SchedulePlan:
    """One engine step: prompts to prefill (admitted this step) and running requests to decode by one token."""

    prefill: list[Request] = field(default_factory=list)
    decode: list[Request] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode

    @property
    def requests(self) -> list[Request]:
        return [*self.prefill, *self.decode]


class Scheduler:
    """First-come first-served admission into a fixed pool of slots.

    Invariants: a request holds a slot iff its status is RUNNING or FROZEN; at most `max_slots` do; a paused
    scheduler admits nothing (its queue only grows); FROZEN requests are never planned. Requests join the running
    batch at any step (their prefill) and leave it as soon as they end, so the batch changes every step.
    """

    def __init__(self, max_slots: int, max_prefill_tokens: int) -> None:
        self.max_slots = max_slots
        self.max_prefill_tokens = max_prefill_tokens
        self.paused = False
        self.live: dict[str, Request] = {}  # every WAITING, RUNNING or FROZEN request by id
        self._waiting: deque[Request] = deque()
        self._free_slots: list[int] = list(range(max_slots - 1, -1, -1))  # pop() gives the lowest slot

    # ------------------------------------------------------------------ queries
    def get(self, request_id: str) -> Request | None:
        return self.live.get(request_id)

    def by_status(self, status: RequestStatus) -> list[Request]:
        return [r for r in self.live.values() if r.status == status]

    @property
    def num_waiting(self) -> int:
        return sum(1 for r in self.live.values() if r.status == RequestStatus.WAITING)

    @property
    def num_running(self) -> int:
        return sum(1 for r in self.live.values() if r.status == RequestStatus.RUNNING)

    @property
    def num_free_slots(self) -> int:
        return len(self._free_slots)

    def has_runnable(self) -> bool:
        """Whether a step now would do anything."""
        if any(r.status == RequestStatus.RUNNING for r in self.live.values()):
            return True
        return not self.paused and bool(self._free_slots) and self.num_waiting > 0

    # ------------------------------------------------------------------ transitions
    def add(self, request: Request) -> None:
        if request.request_id in self.live:
            raise ValueError(f"request_id {request.request_id!r}: expected a new id, got one that is still running")
        request.status = RequestStatus.WAITING
        self.live[request.request_id] = request
        self._waiting.append(request)

    def plan(self) -> SchedulePlan:
        """Decodes every RUNNING request that has a token; admits waiting ones while slots and budget allow."""
        running = [r for r in self.live.values() if r.status == RequestStatus.RUNNING]
        plan = SchedulePlan(decode=sorted(running, key=lambda r: r.slot))  # ascending slots: often one contiguous run
        budget = self.max_prefill_tokens
        while self._waiting and not self.paused and self._free_slots:
            head = self._waiting[0]
            if head.status != RequestStatus.WAITING:  # ended while queued
                self._waiting.popleft()
                continue
            if plan.prefill and head.context_len > budget:
                break
            self._waiting.popleft()
            head.slot = self._free_slots.pop()
            head.status = RequestStatus.RUNNING
            budget -= head.context_len
            plan.prefill.append(head)
        return plan

    def end(self, request: Request, status: RequestStatus) -> None:
        """Removes a live request (FINISHED or ABORTED) and frees its slot."""
        if status not in (RequestStatus.FINISHED, RequestStatus.ABORTED):
            raise ValueError(f"Scheduler.end: expected FINISHED or ABORTED, got {status}")
        if self.live.get(request.request_id) is not request:
            raise ValueError(f"Scheduler.end: request {request.request_id!r} is not live")
        del self.live[request.request_id]
        if request.slot is not None:
            self._free_slots.append(request.slot)
            self._free_slots.sort(reverse=True)
            request.slot = None
        request.status = status

    def freeze_running(self) -> int:
        """pause("keep"): running requests keep their slot and KV cache but are not stepped."""
        running = self.by_status(RequestStatus.RUNNING)
        for r in running:
            r.status = RequestStatus.FROZEN
        return len(running)

    def thaw(self) -> int:
        frozen = self.by_status(RequestStatus.FROZEN)
        for r in frozen:
            r.status = RequestStatus.RUNNING
        return len(frozen)
