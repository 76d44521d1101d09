"""The engine contract: checks that every `rollout_core.Engine` (native, vLLM, SGLang) must pass unchanged.

Use from a test module:

    @pytest.mark.parametrize("check", engine_contract.CHECKS, ids=lambda c: c.__name__)
    def test_engine_contract(check):
        engine_contract.run_check(check, make_harness)

`make_harness` is an async factory returning an `EngineHarness`; it runs inside the check's event loop.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from rollout_core.engine import Engine
from rollout_core.params import SamplingParams
from rollout_core.resume import generate_with_resume
from rollout_core.segment import Segment, StopReason
from rollout_core.trajectory import TrajectoryStatus


@dataclass
class EngineHarness:
    """An engine under test plus what the checks need to know about it."""

    engine: Engine
    vocab_size: int
    max_context: int  # prompt + new tokens the engine accepts
    update_weights: Callable[[], Awaitable[None]] | None = None  # pushes DIFFERENT weights; version increases
    close: Callable[[], Awaitable[None]] | None = None

    def prompt(self, n: int = 8, offset: int = 0) -> list[int]:
        """A deterministic prompt of `n` ids inside the vocabulary (avoiding the lowest, often special, ids)."""
        return [(7 + 13 * i + offset) % (self.vocab_size - 4) + 4 for i in range(n)]


Check = Callable[[EngineHarness], Awaitable[None]]


def run_check(check: Check, make_harness: Callable[[], Awaitable[EngineHarness]]) -> None:
    async def main() -> None:
        harness = await make_harness()
        try:
            await check(harness)
        finally:
            if harness.close is not None:
                await harness.close()

    asyncio.run(main())


def _check_segment(h: EngineHarness, seg: Segment, context_len: int, params: SamplingParams) -> None:
    g = len(seg.token_ids)
    assert g <= params.max_new_tokens, f"{g} tokens for max_new_tokens={params.max_new_tokens}"
    assert len(seg.log_probs) == g, f"{len(seg.log_probs)} log-probs for {g} tokens"
    assert all(0 <= t < h.vocab_size for t in seg.token_ids), f"token ids outside the vocabulary: {seg.token_ids}"
    assert all(math.isfinite(x) and x <= 1e-6 for x in seg.log_probs), f"log-probs not <= 0: {seg.log_probs}"
    if seg.stop_reason == StopReason.LENGTH:
        assert g == params.max_new_tokens, f"stop_reason length after {g} of {params.max_new_tokens} tokens"
    if seg.stop_reason == StopReason.STOP:
        assert g >= 1, "stop_reason stop without a token"
    spec = h.engine.routing_spec
    if spec is None or not params.return_routed_experts:
        assert seg.routed_experts is None, "routing returned though not requested (or for a dense model)"
        return
    if seg.routed_experts is None or g == 0:
        return  # an engine may return no routing for an aborted call (vLLM)
    rows = np.asarray(seg.routed_experts)
    expected = context_len + g - 1 - seg.routed_experts_start
    assert seg.routed_experts_start == params.routed_experts_start, (
        f"routed_experts_start {seg.routed_experts_start}, requested {params.routed_experts_start}"
    )
    assert rows.shape == (expected, spec.num_layers, spec.top_k), (
        f"routing rows shape {rows.shape}, expected {(expected, spec.num_layers, spec.top_k)} (N-1 convention)"
    )
    assert rows.size == 0 or (rows.min() >= 0 and rows.max() < spec.num_experts), "expert ids out of range"


async def check_generate_shapes(h: EngineHarness) -> None:
    """Tokens, log-probs and routing rows of a plain call obey the Segment contract and the budget."""
    for max_new in (1, 5, 17):
        params = SamplingParams(max_new_tokens=max_new, temperature=1.0, seed=3)
        prompt = h.prompt(9)
        seg = await h.engine.generate(f"shapes-{max_new}", prompt, params)
        assert seg.stop_reason in (StopReason.STOP, StopReason.LENGTH), seg.stop_reason
        _check_segment(h, seg, len(prompt), params)
        assert seg.weight_version == h.engine.weight_version


async def check_routed_experts_start(h: EngineHarness) -> None:
    """Rows are returned from the requested start position on, and not at all when not requested."""
    prompt = h.prompt(12)
    for start in (0, 5, 11):
        params = SamplingParams(max_new_tokens=6, temperature=0.0, routed_experts_start=start)
        seg = await h.engine.generate(f"start-{start}", prompt, params)
        _check_segment(h, seg, len(prompt), params)
        if h.engine.routing_spec is not None:
            assert seg.routed_experts is not None, "a finished call of a MoE engine must return routing"
    off = SamplingParams(max_new_tokens=4, return_routed_experts=False)
    seg = await h.engine.generate("start-off", prompt, off)
    assert seg.routed_experts is None


async def check_seeded_determinism(h: EngineHarness) -> None:
    """The same seed gives the same tokens (and log-probs up to float noise), alone or among other requests."""
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=1234)
    prompt = h.prompt(7, offset=3)
    alone = await h.engine.generate("det-a", prompt, params)
    others = [h.engine.generate(f"det-noise-{i}", h.prompt(5 + i, offset=i), params.replace(seed=i)) for i in range(4)]
    crowd, *_ = await asyncio.gather(h.engine.generate("det-b", prompt, params), *others)
    assert crowd.token_ids == alone.token_ids, f"{crowd.token_ids} != {alone.token_ids}"
    np.testing.assert_allclose(crowd.log_probs, alone.log_probs, atol=1e-3)


async def check_greedy_continuation(h: EngineHarness) -> None:
    """Greedy decoding resumed from prompt + first tokens continues exactly as the uninterrupted call."""
    prompt = h.prompt(10, offset=5)
    full = await h.engine.generate("greedy-full", prompt, SamplingParams(max_new_tokens=10, temperature=0.0))
    k = len(full.token_ids) // 2
    if full.stop_reason == StopReason.STOP or k == 0:
        return  # stopped too early to split; the shapes check still covers the call
    rest = await h.engine.generate(
        "greedy-rest", prompt + full.token_ids[:k], SamplingParams(max_new_tokens=10 - k, temperature=0.0)
    )
    assert rest.token_ids == full.token_ids[k:], f"{rest.token_ids} != {full.token_ids[k:]}"
    np.testing.assert_allclose(rest.log_probs, full.log_probs[k:], atol=1e-3)


async def check_stop_token(h: EngineHarness) -> None:
    """A generated stop token ends the call, is included in the output, and gives stop_reason stop."""
    prompt = h.prompt(6, offset=11)
    free = await h.engine.generate("stop-free", prompt, SamplingParams(max_new_tokens=8, temperature=0.0))
    stop_at = free.token_ids[-1] if free.stop_reason == StopReason.STOP else free.token_ids[3]
    params = SamplingParams(max_new_tokens=8, temperature=0.0, stop_token_ids=(stop_at,))
    seg = await h.engine.generate("stop-tok", prompt, params)
    assert seg.stop_reason == StopReason.STOP, seg.stop_reason
    assert seg.token_ids[-1] == stop_at and stop_at not in seg.token_ids[:-1]
    assert seg.token_ids == free.token_ids[: len(seg.token_ids)]


async def check_abort_in_flight(h: EngineHarness) -> None:
    """Aborting an in-flight call returns stop_reason abort with the tokens generated so far.

    A fast engine may finish a call before an abort reaches it, so up to three calls are tried; at least one
    must come back aborted, and every one must obey the Segment contract.
    """
    prompt = h.prompt(8)
    budget = min(h.max_context - len(prompt) - 1, 4096)
    params = SamplingParams(max_new_tokens=budget, temperature=1.0, seed=5)
    for attempt in range(3):
        task = asyncio.create_task(h.engine.generate(f"abort-me-{attempt}", prompt, params))
        for _ in range(3):
            await asyncio.sleep(0)
        assert await h.engine.abort(f"abort-me-{attempt}"), "abort of a started call must find it (returns True)"
        seg = await asyncio.wait_for(task, timeout=60)
        _check_segment(h, seg, len(prompt), params)
        if seg.stop_reason == StopReason.ABORT:
            assert len(seg.token_ids) < budget
            return
    raise AssertionError(f"three in-flight calls of {budget} tokens all finished despite an abort")


async def check_abort_unknown_is_noop(h: EngineHarness) -> None:
    """Aborting an id the engine does not know is a no-op that says so (returns False)."""
    assert await h.engine.abort("no-such-request") is False
    seg = await h.engine.generate("after-noop", h.prompt(4), SamplingParams(max_new_tokens=3))
    assert len(seg.token_ids) >= 1


async def check_concurrent_requests(h: EngineHarness) -> None:
    """Many concurrent calls with different prompt lengths and budgets all complete by the contract."""
    calls = [
        (f"conc-{i}", h.prompt(3 + 2 * i, offset=i), SamplingParams(max_new_tokens=4 + i, seed=i)) for i in range(12)
    ]
    segs = await asyncio.gather(*(h.engine.generate(r, p, s) for r, p, s in calls))
    for (_, prompt, params), seg in zip(calls, segs, strict=True):
        assert seg.stop_reason in (StopReason.STOP, StopReason.LENGTH)
        _check_segment(h, seg, len(prompt), params)


async def check_bad_input_raises(h: EngineHarness) -> None:
    """Empty prompts, ids outside the vocabulary and prompts past the context raise ValueError."""
    bad = [[], [h.vocab_size], [-1], h.prompt(h.max_context + 1)]
    for i, prompt in enumerate(bad):
        try:
            await h.engine.generate(f"bad-{i}", prompt, SamplingParams(max_new_tokens=2))
        except ValueError:
            continue
        raise AssertionError(f"prompt #{i} (len {len(prompt)}) was accepted")


async def check_resume_across_weight_update(h: EngineHarness) -> None:
    """A generation interrupted by a weight update finishes by the routing rule (needs `update_weights`)."""
    if h.update_weights is None:
        return
    v0 = h.engine.weight_version
    prompt = h.prompt(8, offset=2)
    params = SamplingParams(max_new_tokens=min(64, h.max_context - 9), temperature=1.0, seed=9)
    task = asyncio.create_task(generate_with_resume(h.engine, "resume-me", prompt, params))
    await asyncio.sleep(0.02)
    await h.update_weights()
    traj = await asyncio.wait_for(task, timeout=120)
    assert h.engine.weight_version > v0
    assert traj.status == TrajectoryStatus.OK, traj.status
    assert len(traj.response_ids) <= params.max_new_tokens
    assert all(v0 <= v <= h.engine.weight_version for v in traj.token_versions)
    assert traj.token_versions == sorted(traj.token_versions), "token versions must not decrease"
    if traj.routing is not None:
        assert traj.routing.missing(traj.num_tokens) == []
        rows = traj.routing.versions
        assert np.all(np.diff(rows) >= 0), "row versions must not decrease with position"
        lag = traj.routing_version_lag()
        assert lag.size == len(traj.response_ids) and np.all(lag >= 0), "a row older than its token"


CHECKS: list[Check] = [
    check_generate_shapes,
    check_routed_experts_start,
    check_seeded_determinism,
    check_greedy_continuation,
    check_stop_token,
    check_abort_in_flight,
    check_abort_unknown_is_noop,
    check_concurrent_requests,
    check_bad_input_raises,
    check_resume_across_weight_update,
]
