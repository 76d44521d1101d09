"""vLLM serving OUR model family: a `moe_models` tiny-preset checkpoint (its `save_pretrained` HF export).

The expert width is set to 80 (the tiny preset has 96): vLLM's CPU MoE kernel pads it to a multiple of 32, so
the weight update here also covers the extension's re-pack with padding. The references are `moe_models`
itself: its captured routing and its logits.
"""

from __future__ import annotations

import asyncio
import string
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from engine_adapters.vllm import VLLMEngine, VLLMServer, VLLMServerConfig
from engine_adapters_vllm_fixtures import VLLM_PYTHON, VLLM_ROUTING, requires_vllm_env
from rollout_core import SamplingParams, Segment

# the reference is moe_models (torch), which this light package does not depend on
torch = pytest.importorskip("torch")
moe_models = pytest.importorskip("moe_models")
from moe_models import MoEConfig, MoEForCausalLM, build_char_tokenizer, load_pretrained, save_pretrained  # noqa: E402

pytestmark = [pytest.mark.vllm, requires_vllm_env, pytest.mark.timeout(900)]

CHARS = string.ascii_letters + string.digits + string.punctuation + " "


def _save(folder: Path, seed: int) -> Path:
    tokenizer = build_char_tokenizer(CHARS)
    torch.manual_seed(seed)
    config = MoEConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, eos_token_id=tokenizer.special_ids[2], moe_intermediate_size=80
    )
    model = MoEForCausalLM(config).eval()
    return save_pretrained(model, folder, tokenizer)


@pytest.fixture(scope="module")
def moe_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VLLMServer, Path, Path]]:
    root = tmp_path_factory.mktemp("moe-models")
    v0, v1 = _save(root / "v0", 0), _save(root / "v1", 1)
    server = VLLMServer.launch(VLLMServerConfig(model=str(v0), python=VLLM_PYTHON, routing=VLLM_ROUTING))
    try:
        yield server, v0, v1
    finally:
        server.stop()


def _reference(folder: Path, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(log-probs [T, V], routed experts sorted per row [T, L, K]) from moe_models on `ids`."""
    model = load_pretrained(folder).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), capture_routing=True)
    return torch.log_softmax(out.logits[0].float(), -1).numpy(), np.sort(out.routed_experts[0].numpy(), axis=-1)


def test_vllm_matches_moe_models_routing_and_logprobs_before_and_after_update(
    moe_server: tuple[VLLMServer, Path, Path],
) -> None:
    server, v0, v1 = moe_server
    prompt = [5, 20, 33, 47, 60, 71, 8, 9]
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)

    async def main() -> tuple[Segment, Segment]:
        engine = await VLLMEngine.connect(server.base_url, routing=VLLM_ROUTING)
        try:
            before = await engine.generate("mm-before", prompt, greedy)
            await engine.update_weights(str(v1), engine.weight_version + 1)
            after = await engine.generate("mm-after", prompt, greedy)
            return before, after
        finally:
            await engine.close()

    before, after = asyncio.run(main())
    for seg, folder in ((before, v0), (after, v1)):
        seq = prompt + seg.token_ids
        log_probs, routed = _reference(folder, seq[:-1])
        rows = log_probs[len(prompt) - 1 :]
        assert seg.token_ids == [int(i) for i in rows.argmax(-1)]
        want = rows[np.arange(len(seg.token_ids)), seg.token_ids]
        np.testing.assert_allclose(seg.log_probs, want, atol=2e-3, rtol=0)
        got = np.sort(np.asarray(seg.routed_experts, dtype=np.int64), axis=-1)
        np.testing.assert_array_equal(got, routed)
