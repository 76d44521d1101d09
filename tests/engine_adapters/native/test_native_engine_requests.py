"""Abort, cancellation, bad input, queueing when slots are full, continuous batching, metrics."""

import asyncio

import pytest
from engine_adapters.native import NativeEngine, RequestStatus
from engine_adapters.native.decode import CachedModel
from engine_adapters.native.testing import tiny_model, wait_until
from rollout_core import SamplingParams, StopReason


def _engine(slots: int = 4, max_len: int = 128, **knobs) -> NativeEngine:
    return NativeEngine(tiny_model(0), slots=slots, max_len=max_len, eos_token_ids=(), **knobs)


def test_native_engine_rejects_bad_input_at_submit_time():
    engine = _engine(max_len=64)
    ok = SamplingParams(max_new_tokens=4)

    async def main():
        with pytest.raises(ValueError, match="empty prompt"):
            await engine.generate("a", [], ok)
        with pytest.raises(ValueError, match=r"\[0, 128\)"):
            await engine.generate("b", [5, 128], ok)
        with pytest.raises(ValueError, match=r"\[0, 128\)"):
            await engine.generate("c", [-1], ok)
        with pytest.raises(ValueError, match="max_len"):
            await engine.generate("d", [5] * 61, ok)  # 61 + 4 > 64
        with pytest.raises(ValueError, match="max_len"):
            await engine.generate("e", [5] * 65, SamplingParams(max_new_tokens=1))
        assert len((await engine.generate("f", [5] * 60, ok)).token_ids) == 4  # 60 + 4 fits exactly
        assert await engine.abort("never-submitted") is False

    asyncio.run(main())


def test_native_engine_rejects_a_duplicate_live_request_id():
    engine = _engine()

    async def main():
        first = asyncio.create_task(engine.generate("dup", [5, 6], SamplingParams(max_new_tokens=50)))
        await wait_until(lambda: engine.request_status("dup") is not None, what="the first call")
        with pytest.raises(ValueError, match="dup"):
            await engine.generate("dup", [5, 6], SamplingParams(max_new_tokens=5))
        await first
        assert len((await engine.generate("dup", [5, 6], SamplingParams(max_new_tokens=5))).token_ids) == 5

    asyncio.run(main())


def test_native_engine_abort_of_a_queued_call_returns_no_tokens_and_no_routing():
    engine = _engine(slots=1)

    async def main():
        running = asyncio.create_task(engine.generate("run", [5, 6, 7], SamplingParams(max_new_tokens=60)))
        queued = asyncio.create_task(engine.generate("queued", [8, 9], SamplingParams(max_new_tokens=5)))
        await wait_until(lambda: engine.request_status("queued") == RequestStatus.WAITING, what="a queued call")
        await wait_until(lambda: engine.metrics().generated_tokens >= 3, what="tokens of the running call")
        assert await engine.abort("queued") is True
        seg = await queued
        assert seg.stop_reason == StopReason.ABORT and seg.token_ids == [] and seg.routed_experts is None
        assert await engine.abort("run") is True
        seg = await running
        assert seg.stop_reason == StopReason.ABORT and 3 <= len(seg.token_ids) < 60
        assert seg.routed_experts.shape[0] == 3 + len(seg.token_ids) - 1
        assert await engine.abort("run") is False  # already ended

    asyncio.run(main())


def test_native_engine_cancelled_caller_frees_its_slot():
    engine = _engine(slots=1)

    async def main():
        task = asyncio.create_task(engine.generate("c", [5, 6], SamplingParams(max_new_tokens=100)))
        await wait_until(lambda: engine.metrics().generated_tokens >= 2, what="tokens")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert engine.request_status("c") is None
        seg = await asyncio.wait_for(engine.generate("next", [5, 6], SamplingParams(max_new_tokens=3)), 30)
        assert len(seg.token_ids) == 3

    asyncio.run(main())


def test_native_engine_queues_calls_beyond_its_slots_and_completes_them_all():
    engine = _engine(slots=4)
    params = SamplingParams(max_new_tokens=12)
    depths: list[int] = []

    async def main():
        tasks = [asyncio.create_task(engine.generate(f"q{i}", [4 + i, 5], params)) for i in range(13)]
        while not all(t.done() for t in tasks):
            m = engine.metrics()
            assert m.running <= 4
            depths.append(m.queue_depth)
            await asyncio.sleep(0.002)
        return [t.result() for t in tasks]

    segs = asyncio.run(main())
    assert all(s.stop_reason == StopReason.LENGTH and len(s.token_ids) == 12 for s in segs)
    assert max(depths) >= 9
    m = engine.metrics()
    assert m.generated_tokens == 13 * 12 and m.preemptions == 0 and m.queue_depth == 0
    assert 0.5 < m.mean_batch_occupancy <= 1.0 and m.tokens_per_s > 0 and m.steps >= 3 * 12


def test_native_engine_short_call_joins_and_leaves_while_a_long_one_runs():
    engine = _engine(slots=4, max_len=512)

    async def main():
        long = asyncio.create_task(engine.generate("long", [5, 6, 7], SamplingParams(max_new_tokens=400)))
        await wait_until(lambda: engine.metrics().generated_tokens >= 5, what="the long call to start")
        short = await engine.generate("short", [8, 9], SamplingParams(max_new_tokens=5))
        assert len(short.token_ids) == 5 and not long.done()
        await engine.abort("long")
        return await long

    assert asyncio.run(main()).stop_reason == StopReason.ABORT


def test_native_engine_serves_a_new_event_loop_per_asyncio_run():
    engine = _engine()
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    first = asyncio.run(engine.generate("x", [5, 6, 7], params))
    second = asyncio.run(engine.generate("x", [5, 6, 7], params))
    assert first.token_ids == second.token_ids


def test_native_engine_stops_on_the_model_eos_token_by_default():
    params = SamplingParams(max_new_tokens=10, temperature=0.0)
    probe = NativeEngine(tiny_model(0), slots=2, max_len=64, eos_token_ids=())
    free = asyncio.run(probe.generate("p", [5, 6, 7], params))
    eos = free.token_ids[4]
    engine = NativeEngine(tiny_model(0, eos_token_id=eos), slots=2, max_len=64)  # same weights, eos set
    seg = asyncio.run(engine.generate("e", [5, 6, 7], params))
    first = free.token_ids.index(eos)
    assert seg.stop_reason == StopReason.STOP and seg.token_ids == free.token_ids[: first + 1]


def test_native_engine_ignore_eos_generates_past_the_eos_token_but_still_stops_on_stop_tokens():
    params = SamplingParams(max_new_tokens=10, temperature=0.0)
    probe = NativeEngine(tiny_model(0), slots=2, max_len=64, eos_token_ids=())
    free = asyncio.run(probe.generate("p", [5, 6, 7], params))
    eos = free.token_ids[2]
    engine = NativeEngine(tiny_model(0, eos_token_id=eos), slots=2, max_len=64)
    on = asyncio.run(engine.generate("e", [5, 6, 7], params.replace(ignore_eos=True)))
    assert on.stop_reason == StopReason.LENGTH and on.token_ids == free.token_ids
    stop_at = free.token_ids[6]
    both = params.replace(ignore_eos=True, stop_token_ids=(stop_at,))
    stopped = asyncio.run(engine.generate("s", [5, 6, 7], both))
    first = free.token_ids.index(stop_at)
    assert stopped.stop_reason == StopReason.STOP and stopped.token_ids == free.token_ids[: first + 1]


def test_native_engine_step_error_fails_its_calls_and_the_engine_recovers(monkeypatch):
    engine = _engine()

    def broken(*args, **kwargs):
        raise RuntimeError("boom: injected model failure")

    async def main():
        monkeypatch.setattr(CachedModel, "forward", broken)  # the prefill call fails
        with pytest.raises(RuntimeError, match="boom"):
            await engine.generate("x", [5, 6], SamplingParams(max_new_tokens=3))
        assert engine.request_status("x") is None and engine.metrics().running == 0
        monkeypatch.undo()
        return await engine.generate("y", [5, 6], SamplingParams(max_new_tokens=3))

    assert len(asyncio.run(main()).token_ids) == 3


def test_native_engine_config_rejects_bad_knobs():
    from engine_adapters.native import EngineConfig

    with pytest.raises(ValueError, match="slots"):
        EngineConfig(slots=0)
    with pytest.raises(ValueError, match="dtype"):
        EngineConfig(dtype="int8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_threads"):
        NativeEngine(tiny_model(0), num_threads=0)
    with pytest.raises(ValueError, match="admission_batch"):
        EngineConfig(admission_batch=0)
    assert EngineConfig(slots=64).admitted_together == 8  # None: an eighth of the slots
    assert EngineConfig(slots=4).admitted_together == 1
    with pytest.raises(ValueError, match="either config or knobs"):
        NativeEngine(tiny_model(0), EngineConfig(), slots=2)
    with pytest.raises(TypeError):
        NativeEngine(tiny_model(0), max_slot=2)  # a misspelt knob is not ignored
