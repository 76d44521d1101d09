"""RolloutFleet's supervision, and a rollouter's loop, leave no failed call unread: asyncio reports an exception
nobody retrieved when its future is collected, from inside whatever code the collector interrupts (on CPython
< 3.11.8 that broke a running `ast.parse` in pytest's terminal summary). Ray actors are stood in for by objects
whose `.remote` calls return asyncio futures, so each scenario fixes which call fails first."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from collections.abc import Awaitable
from typing import Any

import pytest
from async_pipeline import fleet as fleet_module
from async_pipeline.fleet import PipelineError, RolloutFleet, _Member
from ray.exceptions import RayActorError


@dataclasses.dataclass(frozen=True)
class _Spec:
    """The fields of RollouterSpec that the fleet itself reads."""

    rollouter_id: int
    owner_id: int
    crash_after_groups: int = 0


class _Method:
    def __init__(self, result: Any) -> None:
        self.result = result

    def remote(self, *args: Any) -> Any:
        return self.result() if callable(self.result) else self.result


class _Handle:
    """A rollouter actor whose `push_weights` returns `push` (a future)."""

    def __init__(self, push: asyncio.Future[Any]) -> None:
        self.push_weights = _Method(push)


def _failed(loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
    future = loop.create_future()
    future.set_exception(RayActorError())
    return future


def _dead_member(loop: asyncio.AbstractEventLoop) -> _Member:
    """A rollouter whose process died: its push and its run both failed before anyone looked."""
    return _Member(_Spec(0, 0), _Handle(_failed(loop)), _failed(loop), "node-a")  # type: ignore[arg-type]


def _fleet(max_restarts: int, monkeypatch: pytest.MonkeyPatch) -> RolloutFleet:
    async def released(owner_id: int) -> list[int]:
        return []

    broker = type("Broker", (), {"release": _Method(lambda: released(0))})()
    fleet = RolloutFleet([], broker, lambda rid: {}, max_restarts=max_restarts, call_timeout_s=5.0)
    monkeypatch.setattr(fleet_module.ray, "kill", lambda handle, no_restart: None)

    async def spawn(spec: _Spec) -> _Member:
        loop = asyncio.get_running_loop()
        push = loop.create_future()
        push.set_result(0.25)
        return _Member(spec, _Handle(push), loop.create_future(), "node-b")  # type: ignore[arg-type]

    monkeypatch.setattr(fleet, "_spawn", spawn)
    return fleet


def _unretrieved(scenario: Any) -> list[str]:
    """Runs `scenario(loop)`, then collects garbage; returns the messages asyncio reported meanwhile."""
    reports: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reports.append(str(context["message"])))
        await scenario(loop)
        await asyncio.sleep(0)  # done callbacks run
        gc.collect()

    asyncio.run(main())
    return reports


def test_a_rollouter_replaced_after_its_failed_push_leaves_no_unretrieved_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet = _fleet(max_restarts=1, monkeypatch=monkeypatch)

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        fleet.members = {0: _dead_member(loop)}
        assert await fleet.push(weights=None, version=1, mode="keep") == 0.0  # the dead one's push is not timed
        assert fleet.restarts == 1 and fleet.members[0].node == "node-b"

    assert _unretrieved(scenario) == []


def test_a_wait_given_up_on_a_rollouter_error_leaves_no_unretrieved_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet = _fleet(max_restarts=0, monkeypatch=monkeypatch)

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        fleet.members = {0: _dead_member(loop)}
        target = loop.create_future()
        with pytest.raises(PipelineError, match="limit 0: giving up"):
            await fleet.wait(_awaited(target), "trainer step 3", 5.0)
        target.set_exception(RayActorError())  # the call waited on fails after the pipeline gave up

    assert _unretrieved(scenario) == []


async def _awaited(future: Awaitable[Any]) -> Any:
    return await future


def test_a_rollouter_loop_with_two_failed_groups_raises_one_and_reads_both() -> None:
    from async_pipeline.rollouter import _reraise

    async def fail(n: int) -> None:
        raise ValueError(f"group {n}")

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        done, _ = await asyncio.wait({asyncio.create_task(fail(n)) for n in range(2)})
        with pytest.raises(ValueError, match=r"group [01]"):
            _reraise(done)

    assert _unretrieved(scenario) == []
