"""A throttled engine (`step_delay_ms`): slower by the delay per decode step, the same results, and a pause is not
held up by the wait."""

import asyncio
import time

import numpy as np
import pytest
from engine_adapters.native import EngineConfig, NativeEngine, RequestStatus
from engine_adapters.native.testing import tiny_model
from rollout_core import SamplingParams, StopReason

PROMPT = [5, 9, 17, 33]
PARAMS = SamplingParams(max_new_tokens=24, temperature=1.0, seed=7, return_routed_experts=True)


def _generate(step_delay_ms: float) -> tuple[object, float]:
    engine = NativeEngine(tiny_model(5), slots=2, max_len=64, eos_token_ids=(), step_delay_ms=step_delay_ms)

    async def main():
        t0 = time.perf_counter()
        seg = await engine.generate("r", PROMPT, PARAMS)
        return seg, time.perf_counter() - t0

    return asyncio.run(main())


def test_a_throttled_engine_waits_per_decode_step_and_returns_the_same_tokens_log_probs_and_routing() -> None:
    plain, _ = _generate(0)
    throttled, seconds = _generate(20)
    assert throttled.token_ids == plain.token_ids and len(plain.token_ids) == 24
    np.testing.assert_allclose(throttled.log_probs, plain.log_probs, atol=1e-6)
    np.testing.assert_array_equal(throttled.routed_experts, plain.routed_experts)
    assert seconds >= 23 * 0.020  # every burst step after the first token waited


def test_a_pause_during_a_throttled_burst_cuts_the_wait_short_and_the_call_resumes() -> None:
    engine = NativeEngine(tiny_model(5), slots=2, max_len=600, eos_token_ids=(), step_delay_ms=1_500)

    async def main():
        task = asyncio.create_task(engine.generate("r", PROMPT, SamplingParams(max_new_tokens=3)))
        await asyncio.sleep(0.3)  # prefill and the first burst step take milliseconds: the burst is now waiting
        t0 = time.perf_counter()
        await engine.pause("keep")
        paused_in = time.perf_counter() - t0
        frozen = engine.request_status("r")
        await engine.resume()
        return paused_in, frozen, await task

    paused_in, frozen, seg = asyncio.run(main())
    assert paused_in < 0.75  # not the rest of the 1.5 s wait
    assert frozen is RequestStatus.FROZEN
    assert seg.stop_reason == StopReason.LENGTH and len(seg.token_ids) == 3


@pytest.mark.parametrize("delay", [-1.0, 10_001, True, "5"])
def test_a_step_delay_outside_0_to_10000_ms_is_refused(delay: object) -> None:
    with pytest.raises(ValueError, match=r"rollout\.engine\.step_delay_ms: expected a number in 0\.\.10000"):
        EngineConfig(step_delay_ms=delay)  # type: ignore[arg-type]
