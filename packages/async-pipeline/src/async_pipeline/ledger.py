"""PromptLedger: the one record of which prompts were started, finished, trained or must run again.

Prompt `k` (0-based) of the run's prompt stream is the prompt that synchronous training would use at position
`k % prompts_per_step` of step `k // prompts_per_step + 1` (its *slot*); seeds and examples derive from the slot,
so a prompt that runs again draws the same example and seeds.

Invariants (pinned by tests/async_pipeline/test_rl_pipeline_ledger.py):
- every index below `cursor` is either trained (counted, then forgotten) or held here as a ticket: never both,
  never neither; a snapshot lists exactly the held tickets, so a resumed run trains each prompt at most once
  and loses none;
- admission: a new prompt of slot step `s` starts only when the served weight version is >= s - 1 - max_staleness
  (max_staleness = 0: the prompts of step s start only once the weights of step s - 1 are served: synchronous);
- a prompt that must run again (its rollouter died, or, under `staleness_policy rerun`, its group came back too
  stale) goes before any new one.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Generic, TypeVar

from trainers.staleness import oldest_trainable

G = TypeVar("G")


class TicketStatus(enum.StrEnum):
    PENDING = "pending"  # waiting to be leased (new prompts are not held here: they are past the cursor)
    RUNNING = "running"  # leased to a rollouter
    READY = "ready"  # its finished group waits in the queue


@dataclass
class PromptTicket:
    """One prompt of the stream while it is held (trained tickets are dropped). `attempts` counts leases."""

    index: int
    status: TicketStatus = TicketStatus.PENDING
    rollouter: int | None = None
    attempts: int = 0
    min_version: int | None = None  # of its finished group (the oldest token's weight version)

    def slot(self, prompts_per_step: int) -> tuple[int, int]:
        """(slot step >= 1, position in that step) of this prompt."""
        step, position = divmod(self.index, prompts_per_step)
        return step + 1, position


@dataclass
class LedgerCounters:
    """Cumulative counts over the whole run (they survive checkpoints)."""

    leased: int = 0
    trained: int = 0
    rerun_after_fault: int = 0
    excluded_stale: int = 0


@dataclass
class LedgerState:
    """What a checkpoint holds: the cursor, every prompt started but not trained, and the counters.

    Invariants (checked on construction): `cursor` >= 0; `held` are distinct indices in [0, cursor); every
    counter is a non-negative int. A state read from JSON must also account for every started prompt:
    `counters.trained + len(held) == cursor` (otherwise prompts were lost or trained twice).
    """

    cursor: int
    held: list[int]
    counters: LedgerCounters = field(default_factory=LedgerCounters)

    def __post_init__(self) -> None:
        if not _is_int(self.cursor) or self.cursor < 0:
            raise ValueError(f"LedgerState.cursor: expected an int >= 0, got {self.cursor!r}")
        if not isinstance(self.held, list) or any(not _is_int(i) or not 0 <= i < self.cursor for i in self.held):
            raise ValueError(f"LedgerState.held: expected a list of ints in [0, {self.cursor}), got {self.held!r}")
        if len(set(self.held)) != len(self.held):
            raise ValueError(f"LedgerState.held: expected distinct indices, got duplicates in {self.held}")
        bad = {k: v for k, v in vars(self.counters).items() if not _is_int(v) or v < 0}
        if bad:
            raise ValueError(f"LedgerState.counters: expected non-negative ints, got {bad}")

    def to_json_dict(self) -> dict[str, object]:
        return {"cursor": self.cursor, "held": list(self.held), "counters": vars(self.counters).copy()}

    @classmethod
    def from_json_dict(cls, d: object) -> LedgerState:
        """Raises ValueError (got/expected) on missing or extra keys, wrong types, duplicate or out-of-range
        indices, and on counters that do not account for every prompt below the cursor."""
        keys = {"cursor", "held", "counters"}
        if not isinstance(d, dict) or set(d) != keys:
            got = sorted(map(str, d)) if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"LedgerState: expected a dict with keys {sorted(keys)}, got {got}")
        counters = d["counters"]
        names = {f.name for f in fields(LedgerCounters)}
        if not isinstance(counters, dict) or set(counters) != names:
            got = sorted(map(str, counters)) if isinstance(counters, dict) else type(counters).__name__
            raise ValueError(f"LedgerState.counters: expected a dict with keys {sorted(names)}, got {got}")
        state = cls(d["cursor"], d["held"], LedgerCounters(**counters))
        if state.counters.trained + len(state.held) != state.cursor:
            raise ValueError(
                f"LedgerState: expected trained ({state.counters.trained}) + held ({len(state.held)}) == cursor "
                f"({state.cursor}): every started prompt is trained or held, got a mismatch"
            )
        return cls(state.cursor, sorted(state.held), state.counters)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class PromptLedger(Generic[G]):
    """Pure bookkeeping (no waiting, no I/O); `Broker` adds the waiting. `G` is the finished-group payload."""

    def __init__(self, prompts_per_step: int, max_staleness: int, state: LedgerState | None = None) -> None:
        if prompts_per_step < 1 or max_staleness < 0:
            raise ValueError(
                f"PromptLedger: expected prompts_per_step >= 1 and max_staleness >= 0, got {prompts_per_step}, "
                f"{max_staleness}"
            )
        self.prompts_per_step = prompts_per_step
        self.max_staleness = max_staleness
        state = state or LedgerState(0, [])
        self.cursor = state.cursor
        self.counters = LedgerCounters(**vars(state.counters))
        self.tickets: dict[int, PromptTicket] = {i: PromptTicket(i) for i in state.held}
        self._rerun: deque[int] = deque(sorted(state.held))
        self._ready: dict[int, G] = {}

    # ------------------------------------------------------------------ queries
    def admitted_cursor(self, served_version: int) -> int:
        """New prompts with index below this may start under weights `served_version`."""
        return (served_version + 1 + self.max_staleness) * self.prompts_per_step

    def leasable(self, served_version: int) -> int:
        return len(self._rerun) + max(0, self.admitted_cursor(served_version) - self.cursor)

    @property
    def num_ready(self) -> int:
        return len(self._ready)

    def count(self, status: TicketStatus) -> int:
        return sum(t.status is status for t in self.tickets.values())

    # ------------------------------------------------------------------ transitions
    def lease(self, rollouter: int, n: int, served_version: int) -> list[PromptTicket]:
        """Up to `n` tickets for `rollouter`: prompts to run again first (lowest index first), then new ones as
        admission allows. May return fewer than `n`, or none."""
        out: list[PromptTicket] = []
        while len(out) < n and self._rerun:
            out.append(self.tickets[self._rerun.popleft()])
        stop = self.admitted_cursor(served_version)
        while len(out) < n and self.cursor < stop:
            self.tickets[self.cursor] = PromptTicket(self.cursor)
            out.append(self.tickets[self.cursor])
            self.cursor += 1
        for t in out:
            t.status, t.rollouter, t.attempts = TicketStatus.RUNNING, rollouter, t.attempts + 1
        self.counters.leased += len(out)
        return out

    def complete(self, index: int, rollouter: int, group: G, min_version: int | None) -> bool:
        """Records a finished group. Returns False (and keeps nothing) when the ticket is no longer this
        rollouter's: it was released after a fault and may already run elsewhere."""
        t = self.tickets.get(index)
        if t is None or t.status is not TicketStatus.RUNNING or t.rollouter != rollouter:
            return False
        t.status, t.min_version = TicketStatus.READY, min_version
        self._ready[index] = group
        return True

    def release(self, rollouter: int) -> list[int]:
        """A dead rollouter's running tickets go back to run again (before any new prompt)."""
        lost = sorted(
            i for i, t in self.tickets.items() if t.status is TicketStatus.RUNNING and t.rollouter == rollouter
        )
        for i in lost:
            self._requeue(i)
        self.counters.rerun_after_fault += len(lost)
        return lost

    def _requeue(self, index: int) -> None:
        t = self.tickets[index]
        t.status, t.rollouter, t.min_version = TicketStatus.PENDING, None, None
        self._ready.pop(index, None)
        self._rerun.append(index)
        self._rerun = deque(sorted(self._rerun))

    def stale_ready(self, trainer_version: int) -> list[tuple[int, G]]:
        """The ready groups `exclude_stale(trainer_version)` would send to run again, by index (a query)."""
        floor = oldest_trainable(trainer_version, self.max_staleness)
        stale = sorted(i for i in self._ready if (v := self.tickets[i].min_version) is not None and v < floor)
        return [(i, self._ready[i]) for i in stale]

    def exclude_stale(self, trainer_version: int) -> list[int]:
        """Ready groups whose oldest token is older than `trainer_version - max_staleness` run again."""
        floor = oldest_trainable(trainer_version, self.max_staleness)
        stale = sorted(i for i in self._ready if (v := self.tickets[i].min_version) is not None and v < floor)
        for i in stale:
            self._requeue(i)
        self.counters.excluded_stale += len(stale)
        return stale

    def take(self, n: int) -> list[tuple[PromptTicket, G]]:
        """The `n` ready groups of lowest index, in index order; they count as trained and are forgotten.
        Raises when fewer than `n` are ready (the caller waits for `num_ready >= n` first)."""
        if self.num_ready < n:
            raise ValueError(f"take: expected at least {n} ready groups, got {self.num_ready}")
        out = [(self.tickets.pop(i), self._ready.pop(i)) for i in sorted(self._ready)[:n]]
        self.counters.trained += len(out)
        return out

    def snapshot(self) -> LedgerState:
        return LedgerState(self.cursor, sorted(self.tickets), LedgerCounters(**vars(self.counters)))
