"""A REAL vLLM CPU server in bf16 (`--dtype bfloat16`, what `--rollout.engine.dtype bfloat16` launches): it serves,
records routing, and its log-probs are the fp32 model's up to bf16 rounding, not equal to them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from engine_adapters.vllm import VLLMEngine, VLLMServer, VLLMServerConfig
from engine_adapters_vllm_fixtures import VLLM_PYTHON, VLLM_ROUTING, requires_vllm_env
from rollout_core import SamplingParams

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from engine_adapters_tiny_moe import load_reference  # noqa: E402

pytestmark = [pytest.mark.vllm, requires_vllm_env, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def bf16_server(checkpoints: list[Path]) -> Iterator[VLLMServer]:
    config = VLLMServerConfig(
        model=str(checkpoints[0]), python=VLLM_PYTHON, routing=VLLM_ROUTING, max_model_len=512, dtype="bfloat16"
    )
    server = VLLMServer.launch(config)
    try:
        yield server
    finally:
        server.stop()


def test_a_bf16_server_samples_with_routing_and_bf16_rounded_log_probs(
    bf16_server: VLLMServer, checkpoints: list[Path]
) -> None:
    async def main() -> None:
        engine = await VLLMEngine.connect(bf16_server.base_url, routing=VLLM_ROUTING)
        try:
            prompt = [40, 41, 200, 13, 99, 7]
            seg = await engine.generate("bf16", prompt, SamplingParams(max_new_tokens=24, temperature=1.0, seed=3))
        finally:
            await engine.close()
        assert seg.routed_experts is not None and len(seg.routed_experts) == len(prompt) + len(seg.token_ids) - 1
        with torch.no_grad():
            logits = load_reference(checkpoints[0])(torch.tensor([prompt + seg.token_ids])).logits[0].float()
        rows = logits[len(prompt) - 1 : len(prompt) - 1 + len(seg.token_ids)]
        want = torch.log_softmax(rows, dim=-1).gather(1, torch.tensor(seg.token_ids)[:, None])[:, 0].numpy()
        diff = np.abs(np.asarray(seg.log_probs) - want)
        assert diff.mean() > 1e-5 and diff.max() < 0.25, (diff.mean(), diff.max())

    asyncio.run(main())
