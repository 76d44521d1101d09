"""The vLLM adapter on the MoE families beside Qwen3-MoE, against a REAL vLLM CPU server per family.

Every family `vllm_families` marks as served on CPU (bar qwen3_moe, which the other modules cover) is launched from
a tiny checkpoint that transformers' own classes wrote, with the server arguments the table gives. References are
transformers on the same folder: its logits and its router modules' top-k ids.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from engine_adapters.vllm import VLLMEngine, VLLMServer, VLLMServerConfig
from engine_adapters_vllm_fixtures import VLLM_PYTHON, VLLM_ROUTING, requires_vllm_env
from rollout_core import SamplingParams, Segment
from rollout_core.vllm_families import VLLM_FAMILIES
from routing_state import routing_spec

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from engine_adapters_moe_families import CONFIGS, MAX_POSITIONS, TOP_K, reference_forward, save_checkpoint  # noqa: E402

pytestmark = [pytest.mark.vllm, requires_vllm_env, pytest.mark.timeout(900)]

FAMILIES = sorted(f for f, fam in VLLM_FAMILIES.items() if fam.served_on_cpu and f != "qwen3_moe")
PROMPT = [11, 57, 300, 42, 9, 120, 77, 5, 260, 31]  # longer than GPT-OSS's sliding window (8) once generating
GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)


@dataclass
class FamilyServer:
    family: str
    server: VLLMServer
    checkpoints: tuple[Path, Path]  # weight seeds 0 (served at start) and 1


@pytest.fixture(scope="module", params=FAMILIES)
def family_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FamilyServer]:
    family = str(request.param)
    root = tmp_path_factory.mktemp(family)
    v0, v1 = save_checkpoint(family, root / "v0", 0), save_checkpoint(family, root / "v1", 1)
    config = VLLMServerConfig(
        model=str(v0), python=VLLM_PYTHON, routing=VLLM_ROUTING, max_model_len=MAX_POSITIONS, model_type=family
    )
    server = VLLMServer.launch(config)
    try:
        yield FamilyServer(family, server, (v0, v1))
    finally:
        server.stop()


def _num_moe_layers(family: str) -> int:
    config = CONFIGS[family]()
    return config.num_hidden_layers - int(getattr(config, "first_k_dense_replace", 0))


def _assert_matches_transformers(seg: Segment, folder: Path, family: str) -> None:
    """Greedy tokens, their log-probs (2e-3) and every routing row (as sets) equal transformers' on `folder`."""
    seq = PROMPT + seg.token_ids
    logits, want = reference_forward(folder, seq[:-1])  # inputs are positions 0 .. N-2
    rows = torch.log_softmax(logits, dim=-1)[len(PROMPT) - 1 :]
    assert seg.token_ids == rows.argmax(-1).tolist()
    picked = rows[torch.arange(len(seg.token_ids)), torch.tensor(seg.token_ids)].numpy()
    np.testing.assert_allclose(seg.log_probs, picked, atol=2e-3, rtol=0)
    got = np.sort(np.asarray(seg.routed_experts, dtype=np.int64), axis=-1)
    assert got.shape == want.shape == (len(seq) - 1, _num_moe_layers(family), TOP_K)
    np.testing.assert_array_equal(got, want)


async def _generate(server: VLLMServer, request_id: str, push: Path | None = None) -> Segment:
    engine = await VLLMEngine.connect(server.base_url, routing=VLLM_ROUTING)
    try:
        if push is not None:
            await engine.update_weights(str(push), engine.weight_version + 1)
        return await engine.generate(request_id, PROMPT, GREEDY)
    finally:
        await engine.close()


def test_family_routing_rows_tokens_and_log_probs_equal_transformers(family_server: FamilyServer) -> None:
    seg = asyncio.run(_generate(family_server.server, f"{family_server.family}-start"))
    _assert_matches_transformers(seg, family_server.checkpoints[0], family_server.family)


def test_the_routing_spec_names_the_decoder_layer_of_each_column(family_server: FamilyServer) -> None:
    """Dense layers (DeepSeek-V3's first) have no column, and the spec says which layers the columns are."""

    async def spec() -> object:
        engine = await VLLMEngine.connect(family_server.server.base_url, routing=VLLM_ROUTING)
        try:
            return engine.routing_spec
        finally:
            await engine.close()

    config = json.loads((family_server.checkpoints[0] / "config.json").read_text())
    assert asyncio.run(spec()) == routing_spec(config)


@pytest.mark.skipif(VLLM_ROUTING != "extension", reason="the CPU MoE re-pack runs on the CPU model runner only")
def test_family_expert_repack_rebuilds_the_kernel_tensors_vllm_loaded(family_server: FamilyServer) -> None:
    async def diffs() -> list[dict[str, object]]:
        engine = await VLLMEngine.connect(family_server.server.base_url, routing=VLLM_ROUTING)
        try:
            rpc = engine.client.collective_rpc
            return [(await rpc("rl_expert_pack_diff", str(p)))[0] for p in family_server.checkpoints]
        finally:
            await engine.close()

    served, other = asyncio.run(diffs())
    family = family_server.family
    assert served == {"layers": _num_moe_layers(family), "max_abs_diff": 0.0, "model_type": family}
    assert float(other["max_abs_diff"]) > 1e-3  # the comparison sees a different checkpoint


def test_family_weight_push_gives_the_pushed_weights_outputs(family_server: FamilyServer) -> None:
    v0, v1 = family_server.checkpoints
    before = asyncio.run(_generate(family_server.server, f"{family_server.family}-before"))
    pushed = asyncio.run(_generate(family_server.server, f"{family_server.family}-pushed", push=v1))
    back = asyncio.run(_generate(family_server.server, f"{family_server.family}-back", push=v0))
    assert pushed.token_ids != before.token_ids, "the push did not change the outputs"
    _assert_matches_transformers(pushed, v1, family_server.family)
    _assert_matches_transformers(back, v0, family_server.family)
    assert back.token_ids == before.token_ids
