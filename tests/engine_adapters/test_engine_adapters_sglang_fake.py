"""SGLangEngine against an in-process FAKE SGLang server that speaks SGLang's wire format (no real SGLang here:
it does not run on this CPU). What these tests pin is the adapter's side of the protocol and its mapping onto
the Engine contract; scripts/gpu_check_adapters.sh runs the same contract against a real SGLang on a GPU."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from engine_adapters.sglang import ModelShape, SGLangEngine, SGLangServerError
from engine_adapters.testing.fake_sglang import FakeSGLangServer
from rollout_core import SamplingParams, StopReason, generate_with_resume
from rollout_core.testing import engine_contract
from routing_state import RoutingSpec

SHAPE = ModelShape(vocab_size=512, max_context=600, routing_spec=RoutingSpec(2, 2, 8))


@pytest.fixture
def fake() -> Iterator[FakeSGLangServer]:
    server = FakeSGLangServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("check", engine_contract.CHECKS, ids=lambda c: c.__name__)
def test_sglang_engine_passes_engine_contract_against_wire_fake(
    fake: FakeSGLangServer, check: engine_contract.Check, tmp_path: Path
) -> None:
    async def make() -> engine_contract.EngineHarness:
        engine = await SGLangEngine.connect(fake.url, SHAPE)

        async def update() -> None:
            await engine.update_weights(str(tmp_path), engine.weight_version + 1)

        return engine_contract.EngineHarness(engine, SHAPE.vocab_size, SHAPE.max_context, update, engine.close)

    engine_contract.run_check(check, make)


def test_generate_request_carries_sglang_fields(fake: FakeSGLangServer) -> None:
    async def main() -> None:
        engine = await SGLangEngine.connect(fake.url, SHAPE)
        try:
            params = SamplingParams(max_new_tokens=5, temperature=0.5, top_k=0, seed=7, routed_experts_start=3)
            await engine.generate("r", [5, 6, 7, 8], params)
        finally:
            await engine.close()

    asyncio.run(main())
    [body] = [r for r in fake.state.requests if r["path"] == "/generate"]
    assert body["rid"] == "r.1" and body["input_ids"] == [5, 6, 7, 8]
    assert body["return_logprob"] is True and body["return_routed_experts"] is True
    assert body["routed_experts_start_len"] == 3 and body["stream"] is False
    sp = body["sampling_params"]
    assert sp["max_new_tokens"] == 5 and sp["sampling_seed"] == 7 and sp["top_k"] == -1 and sp["no_stop_trim"]
    assert sp["ignore_eos"] is False


def test_full_length_routing_loses_its_last_row(tmp_path: Path) -> None:
    server = FakeSGLangServer(full_rows=True)
    try:

        async def main() -> tuple[np.ndarray, int]:
            engine = await SGLangEngine.connect(server.url, SHAPE)
            try:
                seg = await engine.generate("r", [5, 6, 7], SamplingParams(max_new_tokens=4, routed_experts_start=1))
                return np.asarray(seg.routed_experts), seg.routed_experts_start
            finally:
                await engine.close()

        rows, start = asyncio.run(main())
    finally:
        server.stop()
    assert start == 1 and rows.shape == (3 + 4 - 1 - 1, 2, 2)
    assert [int(r[0, 0]) for r in rows] == list(range(1, 6))  # positions 1..5; position 6 (last token) dropped


def test_abort_returns_tokens_generated_so_far_and_their_rows(fake: FakeSGLangServer) -> None:
    async def main() -> None:
        engine = await SGLangEngine.connect(fake.url, SHAPE)
        try:
            task = asyncio.create_task(engine.generate("a", [9, 9, 9], SamplingParams(max_new_tokens=500)))
            await asyncio.sleep(0.1)
            assert await engine.abort("a") is True
            seg = await task
        finally:
            await engine.close()
        assert seg.stop_reason == StopReason.ABORT and 0 < len(seg.token_ids) < 500
        assert np.asarray(seg.routed_experts).shape[0] == 3 + len(seg.token_ids) - 1

    asyncio.run(main())


def test_update_weights_labels_versions_and_resume_tags_tokens(fake: FakeSGLangServer, tmp_path: Path) -> None:
    async def main() -> None:
        engine = await SGLangEngine.connect(fake.url, SHAPE)
        try:
            assert engine.weight_version == 0  # the server's "default" label
            task = asyncio.create_task(
                generate_with_resume(engine, "g", [4, 5, 6], SamplingParams(max_new_tokens=300, seed=1))
            )
            await asyncio.sleep(0.1)
            await engine.update_weights(str(tmp_path), 1, pause_mode="abort")
            traj = await task
            with pytest.raises(ValueError, match="expected > current"):
                await engine.update_weights(str(tmp_path), 1)
            with pytest.raises(SGLangServerError, match="could not load"):
                await engine.update_weights(str(tmp_path / "missing"), 2)
        finally:
            await engine.close()
        assert traj.num_resumes == 1 and set(traj.token_versions) == {0, 1}
        assert traj.token_versions == sorted(traj.token_versions)
        # each token's log-prob encodes the version the fake sampled it under
        assert [math.floor(-lp + 1e-9) - 1 for lp in traj.response_log_probs] == traj.token_versions
        assert traj.routing is not None and traj.routing.missing(traj.num_tokens) == []

    asyncio.run(main())
    update = next(r for r in fake.state.requests if r["path"] == "/update_weights_from_disk")
    assert update["weight_version"] == "1" and update["flush_cache"] is True
    assert next(r["mode"] for r in fake.state.requests if r["path"] == "/pause_generation") == "abort"


def test_model_shape_counts_moe_layers_from_hf_config(tmp_path: Path) -> None:
    cfg = {
        "model_type": "qwen3_moe",
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "num_hidden_layers": 6,
        "num_experts": 64,
        "num_experts_per_tok": 4,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [1],
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = ModelShape.from_hf_config(tmp_path, max_context=2048)
    assert shape.vocab_size == 1000 and shape.max_context == 2048
    assert shape.routing_spec == RoutingSpec(num_layers=2, top_k=4, num_experts=64, layers=(3, 5))
    dense = {"vocab_size": 10, "max_position_embeddings": 64, "num_hidden_layers": 2}
    (tmp_path / "config.json").write_text(json.dumps(dense))
    assert ModelShape.from_hf_config(tmp_path).routing_spec is None
