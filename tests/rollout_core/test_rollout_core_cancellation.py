"""Cancelling the caller aborts the engine's request: no orphaned request, and the cancellation propagates."""

import asyncio

import pytest
from rollout_core import SamplingParams, StopReason, generate_with_resume
from rollout_core.testing import ScriptedEngine


class DetachedEngine:
    """Runs each request in its own task, as a real engine runs requests in its own loop or process."""

    def __init__(self, inner: ScriptedEngine) -> None:
        self.inner = inner
        self.routing_spec = inner.routing_spec
        self.tasks: list[asyncio.Task] = []

    @property
    def weight_version(self) -> int:
        return self.inner.weight_version

    async def generate(self, request_id, prompt_ids, params):
        task = asyncio.create_task(self.inner.generate(request_id, prompt_ids, params))
        self.tasks.append(task)
        return await asyncio.shield(task)

    async def abort(self, request_id):
        return await self.inner.abort(request_id)


def test_cancelled_caller_aborts_the_engine_request():
    inner = ScriptedEngine(token_delay=0.001)
    engine = DetachedEngine(inner)

    async def main():
        caller = asyncio.create_task(generate_with_resume(engine, "r", [5, 6], SamplingParams(max_new_tokens=4000)))
        await asyncio.sleep(0.02)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        seg = await asyncio.wait_for(engine.tasks[-1], timeout=5)
        return seg

    seg = asyncio.run(main())
    assert seg.stop_reason == StopReason.ABORT and len(seg.token_ids) < 4000
    assert inner.running == {}
