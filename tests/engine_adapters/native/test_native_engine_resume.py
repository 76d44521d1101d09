"""Seeded determinism across batch compositions, and `generate_with_resume` version provenance across updates."""

import asyncio

import numpy as np
from engine_adapters.native import NativeEngine
from engine_adapters.native.testing import perturbed_state, tiny_model, wait_until
from rollout_core import SamplingParams, TrajectoryStatus, generate_with_resume

PROMPT = [9, 33, 71, 5, 18, 60]


def _engine(seed: int = 0, **knobs) -> NativeEngine:
    return NativeEngine(tiny_model(seed), slots=16, max_len=256, eos_token_ids=(), **knobs)


def test_native_engine_seeded_tokens_do_not_depend_on_batch_composition():
    params = SamplingParams(max_new_tokens=30, temperature=1.0, top_p=0.95, seed=77)

    async def alone(engine):
        return await engine.generate("x", PROMPT, params)

    async def crowded(engine, n_before):
        noise = [
            engine.generate(f"n{i}", [4 + i] * (2 + i), params.replace(seed=i, max_new_tokens=5 + 3 * i))
            for i in range(n_before)
        ]
        noise_tasks = [asyncio.create_task(c) for c in noise]  # they take the low slots first
        await asyncio.sleep(0)
        seg = await engine.generate("x", PROMPT, params)
        await asyncio.gather(*noise_tasks)
        return seg

    engine = _engine(seed=8)
    reference = asyncio.run(alone(engine))
    for n_before in (3, 11):
        seg = asyncio.run(crowded(engine, n_before))
        assert seg.token_ids == reference.token_ids
        np.testing.assert_allclose(seg.log_probs, reference.log_probs, atol=1e-5)
    other = asyncio.run(engine.generate("y", PROMPT, params.replace(seed=78)))
    assert other.token_ids != reference.token_ids


def _row_versions_follow_the_rule(traj, switch_tokens: list[int]) -> None:
    """Row p predicts token p+1: it must carry that token's version (prefill rows: the first token's)."""
    c = len(traj.prompt_ids)
    rows = traj.routing.versions
    assert len(rows) == traj.num_tokens - 1 and traj.routing.missing(traj.num_tokens) == []
    expected = [traj.token_versions[max(p + 1 - c, 0)] for p in range(len(rows))]
    assert rows.tolist() == expected
    assert traj.routing_version_lag().tolist() == [0] * len(traj.response_ids)
    versions = np.asarray(traj.token_versions)
    assert [int(np.argmax(versions >= v)) for v in range(1, len(switch_tokens) + 1)] == switch_tokens


def test_native_engine_resume_after_pause_abort_and_update_keeps_row_versions_exact():
    engine = _engine(seed=1)
    params = SamplingParams(max_new_tokens=80, temperature=1.0, seed=5)

    async def main():
        tasks = [
            asyncio.create_task(generate_with_resume(engine, f"t{i}", PROMPT[: 3 + i % 4], params.replace(seed=i)))
            for i in range(8)
        ]
        produced = []
        for version in (1, 2):
            target = engine.metrics().generated_tokens + 8 * 10
            await wait_until(lambda t=target: engine.metrics().generated_tokens >= t, what="progress")
            await engine.pause("abort")
            produced.append(engine.metrics().generated_tokens)
            await engine.update_weights(perturbed_state(engine.model, seed=version), version)
            await engine.resume()
        return await asyncio.gather(*tasks)

    for traj in asyncio.run(main()):
        assert traj.status == TrajectoryStatus.OK and len(traj.response_ids) == 80 and traj.num_resumes == 2
        versions = np.asarray(traj.token_versions)
        assert versions[0] == 0 and versions[-1] == 2 and np.all(np.diff(versions) >= 0)
        switches = [int(np.argmax(versions >= v)) for v in (1, 2)]
        _row_versions_follow_the_rule(traj, switches)


def test_native_engine_resume_across_pause_keep_carries_per_token_versions_in_one_call():
    engine = _engine(seed=2)
    params = SamplingParams(max_new_tokens=60, temperature=1.0, seed=3)

    async def main():
        task = asyncio.create_task(generate_with_resume(engine, "k", PROMPT, params))
        await wait_until(lambda: engine.metrics().generated_tokens >= 10, what="progress")
        await engine.pause("keep")
        await engine.update_weights(perturbed_state(engine.model, seed=1), 1)
        await engine.resume()
        return await task

    traj = asyncio.run(main())
    assert traj.status == TrajectoryStatus.OK and traj.num_resumes == 0 and len(traj.response_ids) == 60
    versions = np.asarray(traj.token_versions)
    switch = int(np.argmax(versions >= 1))
    assert versions[0] == 0 and versions[-1] == 1 and switch >= 10
    _row_versions_follow_the_rule(traj, [switch])
