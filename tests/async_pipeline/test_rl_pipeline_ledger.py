"""PromptLedger and LedgerState: random operation sequences against a brute-force model, plus unit cases.

The model below re-derives every expectation from the rules in the ledger's docstring (admission formula
`served_version >= k // P - max_staleness`, reruns first and lowest index first, ownership on complete), never
from the ledger's own helpers, so a wrong helper cannot make its test pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from async_pipeline.ledger import LedgerCounters, LedgerState, PromptLedger, TicketStatus
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

ROLLOUTERS = st.integers(0, 2)


@dataclass
class ModelTicket:
    status: TicketStatus
    rollouter: int | None = None
    min_version: int | None = None
    payload: str | None = None


@dataclass
class Model:
    """Brute-force mirror of a ledger: every index below `cursor` is in `trained` or `held`."""

    prompts_per_step: int
    max_staleness: int
    served: int = 0
    cursor: int = 0
    trained: set[int] = field(default_factory=set)
    held: dict[int, ModelTicket] = field(default_factory=dict)
    leased: int = 0
    rerun_after_fault: int = 0
    excluded_stale: int = 0

    def admits(self, k: int) -> bool:
        return self.served >= k // self.prompts_per_step - self.max_staleness

    def indices(self, status: TicketStatus) -> list[int]:
        return sorted(i for i, t in self.held.items() if t.status is status)

    def requeue(self, index: int) -> None:
        self.held[index] = ModelTicket(TicketStatus.PENDING)


class LedgerMachine(RuleBasedStateMachine):
    """Random leases, completions, releases, exclusions, takes, version bumps and checkpoint round trips."""

    def __init__(self) -> None:
        super().__init__()
        self.completions = 0

    @initialize(prompts_per_step=st.integers(1, 4), max_staleness=st.integers(0, 2))
    def start(self, prompts_per_step: int, max_staleness: int) -> None:
        self.ledger: PromptLedger[str] = PromptLedger(prompts_per_step, max_staleness)
        self.model = Model(prompts_per_step, max_staleness)

    @rule(rollouter=ROLLOUTERS, n=st.integers(0, 5))
    def lease(self, rollouter: int, n: int) -> None:
        m = self.model
        expected = m.indices(TicketStatus.PENDING)[:n]
        k = m.cursor
        while len(expected) < n and m.admits(k):
            expected.append(k)
            k += 1
        got = self.ledger.lease(rollouter, n, m.served)
        assert [t.index for t in got] == expected
        for t in got:
            assert t.status is TicketStatus.RUNNING and t.rollouter == rollouter
            if t.index >= m.cursor:  # a new prompt: admission must hold for it
                assert m.served >= t.index // m.prompts_per_step - m.max_staleness
            m.held[t.index] = ModelTicket(TicketStatus.RUNNING, rollouter)
        m.cursor = max(m.cursor, k)
        m.leased += len(got)

    @rule(data=st.data(), rollouter=ROLLOUTERS)
    def complete(self, data: st.DataObject, rollouter: int) -> None:
        m = self.model
        index = data.draw(st.sampled_from([*sorted(m.held), *sorted(m.trained), m.cursor]), label="index")
        min_version = data.draw(st.none() | st.integers(0, m.served), label="min_version")
        self.completions += 1
        payload = f"group {index} by {rollouter} #{self.completions}"
        t = m.held.get(index)
        owned = t is not None and t.status is TicketStatus.RUNNING and t.rollouter == rollouter
        assert self.ledger.complete(index, rollouter, payload, min_version) is owned
        if owned:
            m.held[index] = ModelTicket(TicketStatus.READY, rollouter, min_version, payload)

    @rule(rollouter=ROLLOUTERS)
    def release(self, rollouter: int) -> None:
        m = self.model
        lost = [i for i in m.indices(TicketStatus.RUNNING) if m.held[i].rollouter == rollouter]
        assert self.ledger.release(rollouter) == lost
        for i in lost:
            m.requeue(i)
        m.rerun_after_fault += len(lost)

    @rule(lag=st.integers(-1, 3))
    def exclude_stale(self, lag: int) -> None:
        m = self.model
        trainer_version = max(0, m.served + lag)
        stale = [
            i
            for i in m.indices(TicketStatus.READY)
            if (v := m.held[i].min_version) is not None and trainer_version - v > m.max_staleness
        ]
        assert self.ledger.exclude_stale(trainer_version) == stale
        for i in stale:
            m.requeue(i)
        m.excluded_stale += len(stale)

    @rule(data=st.data())
    def take(self, data: st.DataObject) -> None:
        m = self.model
        ready = m.indices(TicketStatus.READY)
        if not ready:
            with pytest.raises(ValueError, match="expected at least 1 ready"):
                self.ledger.take(1)
            return
        n = data.draw(st.integers(1, len(ready)), label="n")
        got = self.ledger.take(n)
        assert [(t.index, g) for t, g in got] == [(i, m.held[i].payload) for i in ready[:n]]
        for i in ready[:n]:
            del m.held[i]
            m.trained.add(i)

    @rule(bump=st.integers(1, 2))
    def serve_newer_weights(self, bump: int) -> None:
        self.model.served += bump

    @rule()
    def checkpoint_and_restore(self) -> None:
        m = self.model
        state = self.ledger.snapshot()
        assert state.held == sorted(m.held)
        restored = LedgerState.from_json_dict(json.loads(json.dumps(state.to_json_dict())))
        assert restored == state
        self.ledger = PromptLedger(m.prompts_per_step, m.max_staleness, restored)
        for i in m.held:
            m.requeue(i)
        assert all(t.status is TicketStatus.PENDING for t in self.ledger.tickets.values())

    @invariant()
    def every_started_prompt_is_trained_or_held_never_both(self) -> None:
        m = self.model
        held = set(self.ledger.tickets)
        assert self.ledger.cursor == m.cursor
        assert held.isdisjoint(m.trained)
        assert held | m.trained == set(range(m.cursor))
        assert self.ledger.counters.trained + len(held) == self.ledger.cursor

    @invariant()
    def tickets_match_the_model(self) -> None:
        m = self.model
        got = {i: (t.status, t.rollouter, t.min_version) for i, t in self.ledger.tickets.items()}
        want = {i: (t.status, t.rollouter, t.min_version) for i, t in m.held.items()}
        assert got == want  # a released, excluded or restored ticket has no owner and no min_version
        assert self.ledger.num_ready == len(m.indices(TicketStatus.READY))

    @invariant()
    def counters_equal_brute_force_counts(self) -> None:
        m = self.model
        assert self.ledger.counters == LedgerCounters(
            leased=m.leased,
            trained=len(m.trained),
            rerun_after_fault=m.rerun_after_fault,
            excluded_stale=m.excluded_stale,
        )


LedgerMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_ledger_random_operations_keep_every_invariant = LedgerMachine.TestCase


# ---------------------------------------------------------------------------------------------- unit cases
def _lease_all(ledger: PromptLedger[str], served: int, rollouters: int = 2) -> list[int]:
    """Leases everything admission allows, round-robin over rollouters, in chunks of 1..2."""
    out: list[int] = []
    r = 0
    while got := ledger.lease(r % rollouters, 1 + r % 2, served):
        out += [t.index for t in got]
        r += 1
    return out


@given(prompts_per_step=st.integers(1, 5), steps=st.integers(1, 6))
@settings(max_examples=30, deadline=None)
def test_max_staleness_zero_reproduces_synchronous_training(prompts_per_step: int, steps: int) -> None:
    p = prompts_per_step
    ledger: PromptLedger[str] = PromptLedger(p, max_staleness=0)
    for step in range(1, steps + 1):
        served = step - 1
        leased = _lease_all(ledger, served)
        assert leased == list(range((step - 1) * p, step * p))
        for t in reversed(list(ledger.tickets.values())):
            assert t.rollouter is not None
            assert ledger.complete(t.index, t.rollouter, f"g{t.index}", served)
        assert ledger.exclude_stale(step - 1) == []
        taken = ledger.take(p)
        assert [t.index for t, _ in taken] == list(range((step - 1) * p, step * p))
        assert [g for _, g in taken] == [f"g{i}" for i in range((step - 1) * p, step * p)]
        assert ledger.lease(0, 1, served) == []  # step + 1's prompts wait for step's weights
    assert ledger.counters == LedgerCounters(leased=steps * p, trained=steps * p)


def test_restored_ledger_leases_held_prompts_lowest_first_before_new_ones() -> None:
    ledger: PromptLedger[str] = PromptLedger(prompts_per_step=2, max_staleness=1)
    assert [t.index for t in ledger.lease(0, 4, 0)] == [0, 1, 2, 3]
    for i in (3, 0, 2):
        assert ledger.complete(i, 0, f"g{i}", 0)
    assert [t.index for t, _ in ledger.take(1)] == [0]
    state = LedgerState.from_json_dict(json.loads(json.dumps(ledger.snapshot().to_json_dict())))
    assert state == LedgerState(cursor=4, held=[1, 2, 3], counters=LedgerCounters(leased=4, trained=1))
    restored: PromptLedger[str] = PromptLedger(2, 1, state)
    assert restored.num_ready == 0 and restored.count(TicketStatus.PENDING) == 3
    assert [t.index for t in restored.lease(5, 2, 1)] == [1, 2]
    assert [(t.index, t.attempts) for t in restored.lease(6, 3, 1)] == [(3, 1), (4, 1), (5, 1)]


def test_rerun_prompts_ignore_admission() -> None:
    state = LedgerState(cursor=10, held=[9, 8], counters=LedgerCounters(leased=10, trained=8))
    ledger: PromptLedger[str] = PromptLedger(prompts_per_step=2, max_staleness=0, state=state)
    assert ledger.leasable(served_version=0) == 2
    assert [t.index for t in ledger.lease(0, 5, served_version=0)] == [8, 9]
    assert ledger.lease(0, 5, served_version=3) == []  # slot step 6 (index 10) needs served version >= 5
    assert [t.index for t in ledger.lease(0, 5, served_version=5)] == [10, 11]


def test_complete_from_released_rollouter_returns_false_and_stores_nothing() -> None:
    ledger: PromptLedger[str] = PromptLedger(prompts_per_step=2, max_staleness=0)
    ledger.lease(0, 2, 0)
    assert ledger.release(0) == [0, 1]
    assert not ledger.complete(0, 0, "late", 0)
    assert ledger.num_ready == 0
    assert [t.index for t in ledger.lease(1, 1, 0)] == [0]
    assert not ledger.complete(0, 0, "late", 0)  # now leased to rollouter 1
    assert ledger.num_ready == 0 and ledger.tickets[0].status is TicketStatus.RUNNING
    assert ledger.complete(0, 1, "fresh", 0)
    assert [g for _, g in ledger.take(1)] == ["fresh"]
    assert ledger.counters.rerun_after_fault == 2


def test_take_returns_lowest_index_ready_groups_in_index_order() -> None:
    ledger: PromptLedger[str] = PromptLedger(prompts_per_step=3, max_staleness=1)
    ledger.lease(0, 6, 0)
    for i in (5, 1, 4, 2):
        ledger.complete(i, 0, f"g{i}", 0)
    assert [(t.index, g) for t, g in ledger.take(3)] == [(1, "g1"), (2, "g2"), (4, "g4")]
    with pytest.raises(ValueError, match="expected at least 2 ready groups, got 1"):
        ledger.take(2)


def test_stale_ready_group_runs_again_before_new_prompts() -> None:
    ledger: PromptLedger[str] = PromptLedger(prompts_per_step=1, max_staleness=1)
    ledger.lease(0, 2, 0)
    ledger.complete(0, 0, "old", 0)
    ledger.complete(1, 0, "no tokens", None)
    assert ledger.exclude_stale(1) == []  # staleness 1 is allowed
    assert ledger.exclude_stale(2) == [0]  # None (no sampled token) is never stale
    assert [t.index for t in ledger.lease(1, 2, 2)] == [0, 2]
    assert ledger.counters.excluded_stale == 1


@pytest.mark.parametrize(("prompts_per_step", "max_staleness"), [(0, 0), (2, -1)])
def test_ledger_rejects_bad_sizes(prompts_per_step: int, max_staleness: int) -> None:
    with pytest.raises(ValueError, match="expected prompts_per_step >= 1 and max_staleness >= 0"):
        PromptLedger(prompts_per_step, max_staleness)


# ------------------------------------------------------------------------------------- LedgerState JSON
def _good() -> dict[str, object]:
    return {
        "cursor": 5,
        "held": [4, 1],
        "counters": {"leased": 7, "trained": 3, "rerun_after_fault": 1, "excluded_stale": 2},
    }


def test_ledger_state_json_round_trip_sorts_held() -> None:
    state = LedgerState.from_json_dict(_good())
    assert state == LedgerState(5, [1, 4], LedgerCounters(7, 3, 1, 2))
    assert LedgerState.from_json_dict(json.loads(json.dumps(state.to_json_dict()))) == state


def _with(**changes: object) -> dict[str, object]:
    d = _good()
    d.update(changes)
    return d


def _counters_with(**changes: object) -> dict[str, object]:
    counters = dict(_good()["counters"])  # type: ignore[call-overload]
    counters.update(changes)
    return _with(counters=counters)


BAD_STATES = {
    "not a dict": ([5, [1]], "expected a dict with keys"),
    "missing key": ({"cursor": 5, "held": [1]}, "expected a dict with keys"),
    "extra key": (_with(ready=[]), "expected a dict with keys"),
    "duplicate held": (_with(held=[1, 4, 1], cursor=6), "expected distinct indices"),
    "held at cursor": (_with(held=[1, 5]), r"expected a list of ints in \[0, 5\)"),
    "negative held": (_with(held=[-1, 4]), r"expected a list of ints in \[0, 5\)"),
    "held not a list": (_with(held="14"), "expected a list of ints"),
    "held float": (_with(held=[1.0, 4]), "expected a list of ints"),
    "held bool": (_with(held=[True, 4]), "expected a list of ints"),
    "cursor str": (_with(cursor="5"), "cursor: expected an int >= 0"),
    "cursor bool": (_with(cursor=True, held=[]), "cursor: expected an int >= 0"),
    "cursor negative": (_with(cursor=-1, held=[]), "cursor: expected an int >= 0"),
    "counters not a dict": (_with(counters=[7, 3, 1, 2]), "counters: expected a dict with keys"),
    "counter missing": (_with(counters={"leased": 7, "trained": 3}), "counters: expected a dict with keys"),
    "counter unknown": (_counters_with(dropped=0), "counters: expected a dict with keys"),
    "counter str": (_counters_with(leased="7"), "counters: expected non-negative ints"),
    "counter negative": (_counters_with(excluded_stale=-1), "counters: expected non-negative ints"),
    "prompt lost": (_counters_with(trained=2), r"expected trained \(2\) \+ held \(2\) == cursor \(5\)"),
    "prompt twice": (_counters_with(trained=4), r"expected trained \(4\) \+ held \(2\) == cursor \(5\)"),
}


@pytest.mark.parametrize("case", sorted(BAD_STATES))
def test_ledger_state_from_json_rejects_bad_input_with_value_error(case: str) -> None:
    data, message = BAD_STATES[case]
    with pytest.raises(ValueError, match=message):
        LedgerState.from_json_dict(data)


def test_ledger_state_constructed_directly_rejects_duplicates() -> None:
    with pytest.raises(ValueError, match="expected distinct indices"):
        LedgerState(cursor=3, held=[1, 1])
