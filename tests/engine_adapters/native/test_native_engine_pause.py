"""pause("abort" | "keep" | "wait"), resume and weight updates under load (16 concurrent calls)."""

import asyncio

import numpy as np
import pytest
from engine_adapters.native import EngineBusyError, NativeEngine, RequestStatus
from engine_adapters.native.testing import perturbed_state, tiny_model, wait_until
from rollout_core import SamplingParams, StopReason

NUM_CALLS = 16


def _prompt(i: int) -> list[int]:
    return [(5 * i + 3 * j) % 120 + 4 for j in range(4 + i % 7)]


def _engine(seed: int = 0, **knobs) -> NativeEngine:
    return NativeEngine(tiny_model(seed), slots=16, max_len=256, eos_token_ids=(), **knobs)


def _launch(engine: NativeEngine, params: SamplingParams, n: int = NUM_CALLS) -> list[asyncio.Task]:
    return [asyncio.create_task(engine.generate(f"r{i}", _prompt(i), params.replace(seed=i))) for i in range(n)]


def test_native_engine_pause_abort_returns_tokens_so_far_and_queues_new_calls():
    engine = _engine()

    async def main():
        tasks = _launch(engine, SamplingParams(max_new_tokens=200))
        await wait_until(lambda: engine.metrics().generated_tokens >= 3 * NUM_CALLS, what="some tokens")
        await engine.pause("abort")
        segs = await asyncio.gather(*tasks)
        for i, seg in enumerate(segs):
            assert seg.stop_reason == StopReason.ABORT and 1 <= len(seg.token_ids) < 200
            assert seg.routed_experts.shape[0] == len(_prompt(i)) + len(seg.token_ids) - 1  # rows kept on abort
        late = asyncio.create_task(engine.generate("late", _prompt(1), SamplingParams(max_new_tokens=3)))
        await asyncio.sleep(0.1)
        assert not late.done() and engine.metrics().queue_depth == 1  # paused: queued, not refused
        await engine.resume()
        assert (await late).stop_reason == StopReason.LENGTH

    asyncio.run(main())


def test_native_engine_pause_keep_freezes_calls_and_continues_them_under_new_weights():
    params = SamplingParams(max_new_tokens=40, temperature=0.0)

    async def run(update: bool):
        engine = _engine(seed=2)
        tasks = _launch(engine, params)
        await wait_until(lambda: engine.metrics().generated_tokens >= 4 * NUM_CALLS, what="some tokens")
        await engine.pause("keep")
        frozen = engine.metrics()
        assert frozen.frozen + sum(t.done() for t in tasks) == NUM_CALLS and frozen.running == 0
        await asyncio.sleep(0.1)
        assert engine.metrics().steps == frozen.steps  # nothing runs while paused
        if update:
            await engine.update_weights(perturbed_state(engine.model, seed=1, scale=0.2), 1)
        await engine.resume()
        return await asyncio.gather(*tasks)

    kept = asyncio.run(run(update=True))
    baseline = asyncio.run(run(update=False))
    for seg in kept:
        assert seg.stop_reason == StopReason.LENGTH and len(seg.token_ids) == 40
        versions = seg.versions()
        assert versions == sorted(versions) and versions[0] == 0 and versions[-1] == 1
        assert seg.token_versions is not None
    switched = [s.versions().index(1) for s in kept]
    assert any(k.token_ids[j:] != b.token_ids[j:] for k, b, j in zip(kept, baseline, switched, strict=True))
    for k, b, j in zip(kept, baseline, switched, strict=True):
        assert k.token_ids[:j] == b.token_ids[:j]  # old-version tokens are the old model's


def test_native_engine_pause_wait_finishes_inflight_calls_and_admits_none():
    engine = NativeEngine(tiny_model(0), slots=4, max_len=256, eos_token_ids=())

    async def main():
        tasks = _launch(engine, SamplingParams(max_new_tokens=30), n=4)
        await wait_until(lambda: engine.metrics().running == 4, what="4 running calls")
        late = asyncio.create_task(engine.generate("late", _prompt(9), SamplingParams(max_new_tokens=5)))
        await engine.pause("wait")
        assert all(engine.request_status(f"r{i}") is None for i in range(4))  # all ended before pause returned
        segs = await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert all(seg.stop_reason == StopReason.LENGTH for seg in segs)
        await asyncio.sleep(0.05)
        assert not late.done()
        await engine.update_weights(perturbed_state(engine.model, seed=3), 7)
        await engine.resume()
        seg = await late
        assert seg.weight_version == 7 and seg.token_versions is None

    asyncio.run(main())


def test_native_engine_update_weights_refuses_a_busy_engine_and_older_versions():
    engine = _engine()

    async def main():
        tasks = _launch(engine, SamplingParams(max_new_tokens=50), n=4)
        await wait_until(lambda: engine.metrics().running > 0, what="a running call")
        with pytest.raises(EngineBusyError, match="pause"):
            await engine.update_weights(perturbed_state(engine.model, seed=1), 1)
        await asyncio.gather(*tasks)
        await engine.update_weights(perturbed_state(engine.model, seed=1), 2)  # idle: allowed
        assert engine.weight_version == 2
        with pytest.raises(ValueError, match=">= 2"):
            await engine.update_weights(perturbed_state(engine.model, seed=1), 1)
        with pytest.raises(ValueError, match="pause mode"):
            await engine.pause("drain")  # type: ignore[arg-type]

    asyncio.run(main())


def test_native_engine_repeated_keep_updates_under_load_give_monotone_per_token_versions():
    engine = _engine(seed=4)

    async def main():
        tasks = _launch(engine, SamplingParams(max_new_tokens=60, temperature=1.0))
        for version in (1, 2, 3):
            target = engine.metrics().generated_tokens + 2 * NUM_CALLS
            await wait_until(lambda t=target: engine.metrics().generated_tokens >= t, what="progress")
            await engine.pause("keep")
            await engine.update_weights(perturbed_state(engine.model, seed=version), version)
            await engine.resume()
        return await asyncio.gather(*tasks)

    for seg in asyncio.run(main()):
        versions = np.asarray(seg.versions())
        assert len(versions) == 60 and np.all(np.diff(versions) >= 0) and versions[0] == 0
        assert set(versions.tolist()) <= {0, 1, 2, 3}
    assert engine.metrics().weight_version == 3


def test_native_engine_request_status_is_visible_while_frozen():
    engine = _engine()

    async def main():
        task = asyncio.create_task(engine.generate("one", _prompt(0), SamplingParams(max_new_tokens=100)))
        await wait_until(lambda: engine.metrics().generated_tokens >= 2, what="a token")
        await engine.pause("keep")
        assert engine.request_status("one") == RequestStatus.FROZEN
        assert await engine.abort("one") is True
        seg = await task
        assert seg.stop_reason == StopReason.ABORT and engine.metrics().frozen == 0

    asyncio.run(main())


def test_native_engine_update_weights_from_an_hf_directory_equals_from_pretrained(tmp_path):
    from moe_models import save_pretrained

    save_pretrained(tiny_model(seed=9), tmp_path)
    engine = _engine(seed=0)
    params = SamplingParams(max_new_tokens=12, temperature=0.0)

    async def main():
        before = await engine.generate("a", _prompt(3), params)
        await engine.update_weights(tmp_path, 5)
        after = await engine.generate("b", _prompt(3), params)
        return before, after

    before, after = asyncio.run(main())
    fresh = NativeEngine.from_pretrained(tmp_path, slots=2, max_len=64, eos_token_ids=())
    reference = asyncio.run(fresh.generate("c", _prompt(3), params))
    assert after.token_ids == reference.token_ids and after.token_ids != before.token_ids
    np.testing.assert_allclose(after.log_probs, reference.log_probs, atol=1e-5)
    assert after.weight_version == 5 and fresh.weight_version == 0
    with pytest.raises(ValueError, match="safetensors"):
        asyncio.run(engine.update_weights(tmp_path / "config.json", 6))
