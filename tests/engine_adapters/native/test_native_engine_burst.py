"""Decode bursts (several decode steps per worker-thread call) change nothing a caller can observe but speed."""

import asyncio

import numpy as np
from engine_adapters.native import NativeEngine
from engine_adapters.native.decode import CachedModel
from engine_adapters.native.testing import tiny_model
from rollout_core import SamplingParams, StopReason

# mixed rows: greedy, temperature, top-k, top-p; varied budgets so rows finish at different steps
PARAMS = [
    SamplingParams(max_new_tokens=5 + 7 * (i % 5), temperature=t, top_k=k, top_p=p, seed=100 + i)
    for i, (t, k, p) in enumerate([(0.0, 0, 1.0), (1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8)] * 3)
]


def _prompt(i: int) -> list[int]:
    return [(7 * i + j) % 120 + 2 for j in range(3 + i % 4)]


def _run(
    decode_burst: int, eos: tuple[int, ...], slots: int, stagger: bool, admission_batch: int | None = None
) -> list:
    engine = NativeEngine(
        tiny_model(5),
        slots=slots,
        max_len=96,
        eos_token_ids=eos,
        decode_burst=decode_burst,
        admission_batch=admission_batch,
    )

    async def one(i: int, params: SamplingParams):
        if stagger:
            await asyncio.sleep(0.004 * i)  # arrivals while bursts run: they must end within one step
        return await engine.generate(f"r{i}", _prompt(i), params.replace(return_routed_experts=True))

    async def main():
        return await asyncio.gather(*(one(i, p) for i, p in enumerate(PARAMS)))

    return asyncio.run(main())


def _assert_same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids and x.stop_reason == y.stop_reason
        np.testing.assert_allclose(x.log_probs, y.log_probs, atol=1e-6)
        np.testing.assert_array_equal(x.routed_experts, y.routed_experts)


def test_native_engine_bursts_give_the_tokens_log_probs_and_routing_of_single_steps():
    # stop tokens 3 and 4 are frequent enough in a 128-token vocabulary to end some rows early
    single = _run(1, (3, 4), slots=16, stagger=False)
    assert {s.stop_reason for s in single} == {StopReason.STOP, StopReason.LENGTH}
    _assert_same(_run(64, (3, 4), slots=16, stagger=False), single)


def test_native_engine_bursts_admit_queued_and_late_calls_like_single_steps():
    # 4 slots for 12 calls (finishes free slots for queued calls), and calls arriving while bursts run
    _assert_same(_run(64, (), slots=4, stagger=True), _run(1, (), slots=4, stagger=True))
    _assert_same(_run(64, (3,), slots=4, stagger=False), _run(1, (3,), slots=4, stagger=False))


def test_native_engine_admission_batches_prefill_fewer_times_and_change_no_result():
    prefills: list[int] = []
    original = CachedModel.forward

    def counting(self, input_ids, slot_ids, query_lens, cache, **kw):
        if max(query_lens) > 1:
            prefills.append(len(query_lens))
        return original(self, input_ids, slot_ids, query_lens, cache, **kw)

    CachedModel.forward = counting
    try:
        one = _run(64, (3,), slots=4, stagger=False, admission_batch=1)
        one_prefills, prefills[:] = list(prefills), []
        three = _run(64, (3,), slots=4, stagger=False, admission_batch=3)
    finally:
        CachedModel.forward = original
    _assert_same(three, one)
    _assert_same(three, _run(1, (3,), slots=4, stagger=False))
    assert sum(one_prefills) == sum(prefills) == len(PARAMS)  # every call prefilled once
    assert len(prefills) < len(one_prefills)  # ... in fewer, larger prefill calls
    assert max(prefills) == 4 and max(prefills[1:]) > 1


def test_native_engine_abort_during_a_burst_returns_within_a_step():
    engine = NativeEngine(tiny_model(5), slots=4, max_len=600, eos_token_ids=(), decode_burst=10_000)

    async def main():
        task = asyncio.create_task(engine.generate("long", _prompt(0), SamplingParams(max_new_tokens=500)))
        while engine.metrics().generated_tokens < 10:  # progress is handed over during the burst
            await asyncio.sleep(0.002)
        assert await engine.abort("long")
        seg = await task
        await engine.pause("abort")  # returns once the burst has stopped
        steps = engine.metrics().steps
        await asyncio.sleep(0.05)
        return seg, steps, engine.metrics().steps

    seg, steps, later = asyncio.run(main())
    assert seg.stop_reason == StopReason.ABORT and 10 <= len(seg.token_ids) < 500
    assert later == steps  # nothing runs after the pause


def test_native_engine_a_burst_left_by_a_closed_loop_stops_and_the_next_loop_is_served():
    engine = NativeEngine(tiny_model(5), slots=4, max_len=600, eos_token_ids=(), decode_burst=10_000)
    params = SamplingParams(max_new_tokens=500, temperature=0.0)

    async def leave_running() -> asyncio.Task:
        left = asyncio.create_task(engine.generate("left", _prompt(1), params))
        while engine.metrics().generated_tokens < 10:
            await asyncio.sleep(0.002)
        return left  # asyncio.run cancels it and closes the loop while the burst may still be running

    async def serve():
        return await engine.generate("next", _prompt(2), params.replace(max_new_tokens=5))

    asyncio.run(leave_running())
    with engine._runner._lock:  # white-box: waits for the abandoned burst, then reads how far its slot got
        abandoned_len = int(engine._runner.cache.lengths[0])
    assert abandoned_len < len(_prompt(1)) + 100  # it stopped within a step or so, not after 500 tokens
    seg = asyncio.run(serve())
    assert seg.stop_reason == StopReason.LENGTH and len(seg.token_ids) == 5


def test_pause_abort_returns_every_token_the_burst_computed() -> None:
    """Aborted calls come back with all tokens computed so far: none is computed and then dropped."""
    engine = NativeEngine(tiny_model(5), slots=2, max_len=400, eos_token_ids=(), num_threads=1)
    params = SamplingParams(max_new_tokens=390, temperature=1.0, seed=3)

    async def main():
        calls = [asyncio.create_task(engine.generate(f"r{i}", _prompt(i), params)) for i in range(3)]
        while engine.metrics().generated_tokens < 20:
            await asyncio.sleep(0.002)
        await engine.pause("abort")
        segments = await asyncio.gather(*calls)
        await engine.close()
        return segments

    segments = asyncio.run(main())
    assert all(s.stop_reason is StopReason.ABORT for s in segments)
    assert sum(len(s.token_ids) for s in segments) == engine.metrics().generated_tokens > 0


def test_native_engine_metrics_count_each_burst_step_once_when_rows_finish_apart() -> None:
    # rows finishing one by one are handed over in chunks of their own; steps and tokens must still add up
    lengths = [3, 9, 17, 30]
    engine = NativeEngine(tiny_model(6), slots=4, max_len=64, eos_token_ids=(), decode_burst=64)

    async def main():
        params = [SamplingParams(max_new_tokens=n, seed=i) for i, n in enumerate(lengths)]
        return await asyncio.gather(*(engine.generate(f"m{i}", _prompt(i), p) for i, p in enumerate(params)))

    segments = asyncio.run(main())
    assert [len(s.token_ids) for s in segments] == lengths
    metrics = engine.metrics()
    assert metrics.generated_tokens == sum(lengths)
    assert metrics.steps == max(lengths)  # one step per token of the longest row: no step counted twice
    assert abs(metrics.mean_batch_occupancy - sum(lengths) / (4 * max(lengths))) < 1e-9
