"""Broker: the waiting around the ledger (admission, back-pressure, staleness exclusion, faults, stop).

Each test runs one event loop in-process (`asyncio.run`). "Blocks" is asserted by letting the loop run for
`SETTLE_S` and checking the call is still pending: within one loop nothing else can wake it, so a short settle
is as good as a long one. Every awaited result has a `DEADLINE_S` so a regression fails instead of hanging.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import pytest
from async_pipeline.broker import Broker
from async_pipeline.group import FinishedGroup
from async_pipeline.ledger import LedgerCounters, LedgerState
from rl_tasks.example import TaskExample
from rollout_core import SamplingParams, Trajectory
from trainers.rollout.samples import GenRequest, SampleStatus, ScoredSample

SETTLE_S = 0.05
DEADLINE_S = 2.0
T = TypeVar("T")


def group(index: int, rollouter: int, min_version: int | None = None) -> FinishedGroup:
    """A finished group whose oldest token was sampled by `min_version` (None: a group with no token)."""
    if min_version is None:
        return FinishedGroup(index, (), rollouter, 0.0)
    example = TaskExample(uid=f"u{index}", data_source="test", prompt="1+1=", ground_truth="2")
    request = GenRequest(f"p{index}-r0", f"p{index}", example, 0, 0, SamplingParams(max_new_tokens=2))
    trajectory = Trajectory(prompt_ids=[1, 2], response_ids=[3, 4], token_versions=[min_version + 1, min_version])
    sample = ScoredSample(request, trajectory, "", None, SampleStatus.NOT_OK)
    return FinishedGroup(index, (sample,), rollouter, 0.0)


async def pending(call: Awaitable[T]) -> asyncio.Task[T]:
    """Starts `call` and asserts it is still waiting once the loop has settled."""
    task = asyncio.ensure_future(call)
    await asyncio.sleep(SETTLE_S)
    assert not task.done(), f"expected the call to block, got {task.result() if not task.cancelled() else task}"
    return task


async def finish(task: Awaitable[T]) -> T:
    return await asyncio.wait_for(task, DEADLINE_S)


async def lease_indices(broker: Broker, rollouter: int, n: int) -> list[int]:
    return [t.index for t in await finish(broker.lease(rollouter, n))]


def test_group_min_version_comes_from_its_oldest_token() -> None:
    assert group(0, 0).min_version is None
    assert group(0, 0, 3).min_version == 3


def test_lease_blocks_until_admission_opens_and_returns_empty_after_stop() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=2, max_staleness=0, capacity=2, served_version=0)
        assert await lease_indices(broker, 0, 5) == [0, 1]
        blocked = await pending(broker.lease(1, 5))
        await broker.set_served_version(1)
        assert [t.index for t in await finish(blocked)] == [2, 3]
        blocked = await pending(broker.lease(1, 1))
        await broker.stop()
        assert await finish(blocked) == []
        await broker.set_served_version(5)
        assert broker.snapshot().cursor == 4
        assert await finish(broker.lease(2, 1)) == []  # prompts are admitted, but the broker is stopped
        assert broker.snapshot().cursor == 4

    asyncio.run(scenario())


def test_complete_blocks_while_capacity_groups_are_ready_and_proceeds_after_take() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=2, max_staleness=1, capacity=4, served_version=0)
        assert await lease_indices(broker, 0, 8) == [0, 1, 2, 3]
        for i in (3, 2, 1, 0):
            assert await finish(broker.complete(group(i, 0)))
        await broker.set_served_version(1)
        assert await lease_indices(broker, 1, 1) == [4]
        blocked = await pending(broker.complete(group(4, 1)))
        groups, excluded = await finish(broker.take(2, trainer_version=0))
        assert [g.index for g in groups] == [0, 1] and excluded == []
        assert await finish(blocked) is True
        assert broker.stats().ready == 3

    asyncio.run(scenario())


def test_take_waits_for_n_ready_groups_and_returns_them_in_index_order() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=2, max_staleness=0, capacity=2, served_version=0)
        assert await lease_indices(broker, 0, 2) == [0, 1]
        assert await finish(broker.complete(group(1, 0, 0)))
        blocked = await pending(broker.take(2, trainer_version=0))
        assert await finish(broker.complete(group(0, 0, 0)))
        groups, excluded = await finish(blocked)
        assert [g.index for g in groups] == [0, 1] and excluded == []
        assert broker.stats().counters == LedgerCounters(leased=2, trained=2)

    asyncio.run(scenario())


def test_take_excludes_too_stale_group_and_its_prompt_runs_again_before_new_ones() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=2, max_staleness=1, capacity=4, served_version=0)
        assert await lease_indices(broker, 0, 4) == [0, 1, 2, 3]
        for i in (0, 1):
            assert await finish(broker.complete(group(i, 0, 0)))
        groups, _ = await finish(broker.take(2, trainer_version=0))
        assert [g.index for g in groups] == [0, 1]
        await broker.set_served_version(1)
        assert await finish(broker.complete(group(2, 0, 0)))  # staleness 2 at trainer version 2: too old
        assert await finish(broker.complete(group(3, 0, 1)))  # staleness 1: allowed
        blocked = await pending(broker.take(2, trainer_version=2))
        assert broker.stats().ready == 1 and broker.stats().counters.excluded_stale == 1
        assert await lease_indices(broker, 1, 2) == [2, 4]
        assert await finish(broker.complete(group(2, 1, 1)))
        groups, excluded = await finish(blocked)
        assert [g.index for g in groups] == [2, 3] and [(g.index, g.min_version) for g in excluded] == [(2, 0)]
        assert excluded[0].response_lengths == (2,)
        assert groups[0].rollouter == 1
        assert broker.stats().counters == LedgerCounters(leased=6, trained=4, excluded_stale=1)

    asyncio.run(scenario())


def test_without_rerun_a_group_older_than_the_bound_is_taken_in_its_place_and_nothing_runs_again() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=2, max_staleness=1, capacity=4, served_version=0, rerun_stale=False)
        assert await lease_indices(broker, 0, 4) == [0, 1, 2, 3]
        for i in (0, 1):
            assert await finish(broker.complete(group(i, 0, 0)))
        await finish(broker.take(2, trainer_version=0))
        assert await finish(broker.complete(group(2, 0, 0)))  # staleness 2 at trainer version 2: beyond the bound
        assert await finish(broker.complete(group(3, 0, 1)))
        groups, excluded = await finish(broker.take(2, trainer_version=2))
        assert [g.index for g in groups] == [2, 3] and excluded == []
        assert broker.stats().counters == LedgerCounters(leased=4, trained=4)

    asyncio.run(scenario())


def test_excluding_a_stale_group_wakes_a_lease_blocked_on_admission() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=1, max_staleness=0, capacity=1, served_version=0)
        assert await lease_indices(broker, 0, 1) == [0]
        assert await finish(broker.complete(group(0, 0, 0)))
        waiting = await pending(broker.lease(1, 1))
        take = asyncio.ensure_future(broker.take(1, trainer_version=1))
        assert [t.index for t in await finish(waiting)] == [0]
        assert not take.done()
        assert await finish(broker.complete(group(0, 1, 1)))
        groups, excluded = await finish(take)
        assert [(g.index, g.rollouter) for g in groups] == [(0, 1)] and [g.index for g in excluded] == [0]

    asyncio.run(scenario())


def test_released_prompts_are_leasable_again_and_a_late_complete_from_the_dead_rollouter_is_refused() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=2, max_staleness=0, capacity=2, served_version=0)
        assert await lease_indices(broker, 0, 2) == [0, 1]
        assert await finish(broker.complete(group(0, 0)))
        waiting = await pending(broker.lease(1, 2))  # admission is closed and nothing runs again yet
        assert await broker.release(0) == [1]
        assert [t.index for t in await finish(waiting)] == [1]
        assert await finish(broker.complete(group(1, 0))) is False
        assert broker.stats().ready == 1
        assert await finish(broker.complete(group(1, 1)))
        groups, _ = await finish(broker.take(2, trainer_version=0))
        assert [(g.index, g.rollouter) for g in groups] == [(0, 0), (1, 1)]
        assert broker.stats().counters == LedgerCounters(leased=3, trained=2, rerun_after_fault=1)

    asyncio.run(scenario())


def test_late_complete_blocked_by_back_pressure_is_refused_once_its_prompt_was_released() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=1, max_staleness=1, capacity=1, served_version=0)
        assert await lease_indices(broker, 0, 2) == [0, 1]
        assert await finish(broker.complete(group(0, 0)))
        late = await pending(broker.complete(group(1, 0)))
        assert await broker.release(0) == [1]
        assert await lease_indices(broker, 1, 1) == [1]
        await finish(broker.take(1, trainer_version=0))
        assert await finish(late) is False
        assert broker.stats().ready == 0 and broker.stats().running == 1

    asyncio.run(scenario())


def test_stop_wakes_a_blocked_take_with_an_error_that_states_the_broker() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=2, max_staleness=0, capacity=2, served_version=0)
        await lease_indices(broker, 0, 2)
        blocked = await pending(broker.take(2, trainer_version=0))
        await broker.stop()
        with pytest.raises(
            RuntimeError,
            match=r"stopped while waiting for 2 groups \(served version 0, cursor 2, "
            r"ready 0, running 2",
        ):
            await finish(blocked)

    asyncio.run(scenario())


def test_stop_releases_a_complete_blocked_by_back_pressure() -> None:
    async def scenario() -> None:
        broker = Broker(prompts_per_step=1, max_staleness=1, capacity=1, served_version=0)
        await lease_indices(broker, 0, 2)
        assert await finish(broker.complete(group(0, 0)))
        blocked = await pending(broker.complete(group(1, 0)))
        await broker.stop()
        assert await finish(blocked) is False

    asyncio.run(scenario())


def test_broker_resumes_from_a_snapshot_with_held_prompts_first() -> None:
    async def scenario() -> None:
        state = LedgerState(cursor=4, held=[1, 3], counters=LedgerCounters(leased=4, trained=2))
        broker = Broker(prompts_per_step=2, max_staleness=0, capacity=2, served_version=2, state=state)
        assert await lease_indices(broker, 0, 3) == [1, 3, 4]
        assert broker.snapshot() == LedgerState(5, [1, 3, 4], LedgerCounters(leased=7, trained=2))

    asyncio.run(scenario())


def test_broker_rejects_sizes_that_would_deadlock() -> None:
    with pytest.raises(ValueError, match=r"expected capacity >= prompts_per_step \(4\), got 3"):
        Broker(prompts_per_step=4, max_staleness=0, capacity=3, served_version=0)

    async def scenario() -> None:
        broker = Broker(prompts_per_step=2, max_staleness=0, capacity=2, served_version=0)
        with pytest.raises(ValueError, match=r"expected 1 <= n <= capacity \(2\), got 3"):
            await finish(broker.take(3, trainer_version=0))
        with pytest.raises(ValueError, match="expected >= 0, got -1"):
            await broker.set_served_version(-1)

    asyncio.run(scenario())
