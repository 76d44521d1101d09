"""RolloutFleet: the rollouter actors, their weight pushes, and their supervision.

While the driver waits for anything (a train step, a push), `wait` also watches every rollouter's `run` call.
A rollouter whose process died is replaced: its leased prompts go back to the broker (they run again before any
new prompt), a fresh actor is started on the latest weights in the same resource bundle, and the driver's wait
continues. An error raised *inside* a rollouter (a bug, not a crash) is re-raised with its context; so is a
push that fails or times out. Nothing waits without a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError

from async_pipeline.placement import Placement
from async_pipeline.rollouter import Rollouter, RollouterSpec


class PipelineError(RuntimeError):
    """A failure of the pipeline with the context needed to act on it (which actor, which step, what state)."""


def cause(exc: BaseException) -> str:
    """The original exception of a Ray task error, as `Type: message` (Ray's own text adds a remote traceback)."""
    inner = getattr(exc, "cause", None)
    inner = inner if isinstance(inner, BaseException) else exc
    return f"{type(inner).__name__}: {inner}"


def _retrieve_when_done(future: asyncio.Future[Any]) -> None:
    """Marks the outcome of a call nobody will read as read, now or whenever it ends.

    asyncio logs an exception that was never retrieved when the future is collected, from whatever code the
    garbage collector interrupts: a spurious error line for the user, and on CPython < 3.11.8 a traceback formatted
    inside a running `ast.parse` breaks that parse (SystemError "AST constructor recursion depth mismatch")."""
    future.add_done_callback(lambda f: None if f.cancelled() else f.exception())


@dataclasses.dataclass
class _Member:
    spec: RollouterSpec
    handle: Any
    run: asyncio.Future[Any]
    node: str  # the Ray node it runs on


class RolloutFleet:
    def __init__(
        self,
        specs: list[RollouterSpec],
        broker: Any,
        options: Callable[[int], dict[str, Any]],
        *,
        max_restarts: int,
        call_timeout_s: float,
        teachers: dict[str, tuple[Any, ...]] | None = None,
    ) -> None:
        self.specs = specs
        self.broker = broker
        self.teachers = teachers
        self.options = options
        self.max_restarts = max_restarts
        self.call_timeout_s = call_timeout_s
        self.members: dict[int, _Member] = {}
        self.restarts = 0
        self.released_prompts = 0
        self.weights: Any = None  # ObjectRef of the latest pushed WeightHandle (None: the base checkpoint)
        self.version = 0
        self.stopping = False
        self.placement: Placement | None = None  # where the members run; told of every replacement

    async def _spawn(self, spec: RollouterSpec) -> _Member:
        handle = (
            ray.remote(Rollouter).options(**self.options(spec.rollouter_id)).remote(spec, self.broker, self.teachers)
        )
        try:
            await asyncio.wait_for(handle.start.remote(self.weights), self.call_timeout_s)
        except (TimeoutError, RayActorError, ray.exceptions.RayTaskError) as exc:
            raise PipelineError(
                f"rollouter {spec.rollouter_id}: start at weight version {self.version} failed: {cause(exc)}"
            ) from exc
        node = await handle.node_id.remote()
        return _Member(spec, handle, asyncio.ensure_future(handle.run.remote()), node)

    async def start(self, weights: Any, version: int) -> None:
        self.weights, self.version = weights, version
        members = await asyncio.gather(*(self._spawn(s) for s in self.specs))
        self.members = {m.spec.rollouter_id: m for m in members}

    async def _replace(self, member: _Member, error: BaseException) -> None:
        rid = member.spec.rollouter_id
        if self.restarts >= self.max_restarts:
            raise PipelineError(
                f"rollouter {rid} died ({cause(error)}); {self.restarts} restarts already, limit "
                f"{self.max_restarts}: giving up"
            ) from error
        self.restarts += 1
        _retrieve_when_done(member.run)  # replaced after a failed push, its run's error may not have been read
        self.released_prompts += len(await self.broker.release.remote(member.spec.owner_id))
        ray.kill(member.handle, no_restart=True)
        # a new owner id: a late result of the dead incarnation is refused; an injected fault fires once
        spec = dataclasses.replace(
            member.spec, owner_id=len(self.specs) * (self.restarts + 1) + rid, crash_after_groups=0
        )
        self.members[rid] = await self._spawn(spec)
        if self.placement is not None:
            self.placement.rollouter_started(rid, self.members[rid].node, self.version)

    async def _check_runs(self) -> None:
        for member in list(self.members.values()):
            if not member.run.done():
                continue
            exc = member.run.exception()
            if isinstance(exc, RayActorError):
                await self._replace(member, exc)
            elif exc is not None:
                raise PipelineError(f"rollouter {member.spec.rollouter_id} failed: {cause(exc)}") from exc
            elif not self.stopping:
                raise PipelineError(f"rollouter {member.spec.rollouter_id}: run() returned before stop()")

    async def wait(self, ref: Any, what: str, timeout_s: float, describe: Callable[[], Any] | None = None) -> Any:
        """The result of `ref`, replacing dead rollouters meanwhile; PipelineError after `timeout_s`."""
        target = asyncio.ensure_future(ref)
        deadline = time.monotonic() + timeout_s
        while True:
            runs = [m.run for m in self.members.values()]
            done, _ = await asyncio.wait(
                [target, *runs], timeout=max(0.0, deadline - time.monotonic()), return_when=asyncio.FIRST_COMPLETED
            )
            if target in done:
                return target.result()
            if not done:
                target.cancel()
                state = await describe() if describe is not None else ""
                raise PipelineError(f"{what}: no result after {timeout_s:.0f} s. {state}")
            try:
                await self._check_runs()
            except BaseException:
                _retrieve_when_done(target)  # the caller gets the rollouter's error, not this call's
                raise

    async def push(self, weights: Any, version: int, mode: str) -> float:
        """Every rollouter serves `version` when this returns (`weights`: an ObjectRef of its WeightHandle);
        returns the slowest push in seconds. A rollouter that dies meanwhile is replaced (it starts on these
        weights)."""
        self.weights, self.version = weights, version
        calls = [(m, m.handle.push_weights.remote(weights, mode)) for m in self.members.values()]
        slowest = 0.0
        for member, ref in calls:
            rid = member.spec.rollouter_id
            try:
                slowest = max(
                    slowest, await self.wait(ref, f"weight push v{version} to rollouter {rid}", self.call_timeout_s)
                )
            except RayActorError as exc:
                if self.members[rid] is member:  # not yet replaced by `wait` (a replacement starts on `weights`)
                    await self._replace(member, exc)
            except ray.exceptions.RayTaskError as exc:
                raise PipelineError(f"weight push v{version} to rollouter {rid} failed: {cause(exc)}") from exc
        return slowest

    async def stop(self) -> None:
        """Stops the loops (the broker must be stopped first so no lease blocks) and closes the engines."""
        self.stopping = True
        members = list(self.members.values())
        await asyncio.gather(*(m.handle.stop.remote() for m in members), return_exceptions=True)
        await asyncio.gather(*(m.run for m in members), return_exceptions=True)
        await asyncio.gather(*(m.handle.close.remote() for m in members), return_exceptions=True)
        for m in members:
            ray.kill(m.handle, no_restart=True)
