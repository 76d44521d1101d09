"""A REAL vLLM CPU server on a checkpoint whose embedding pads beyond its tokenizer, the padding rows carrying the
largest logits by far (written by `moe_models.save_pretrained`, the run's export writer): told the tokenizer's size
(`VLLMEngine.sample_only`: the worker extension masks those logits), the adapter never samples a padding id and its
log-probs equal ours normalised over the tokenizer's ids (to the adapter's usual bound); told nothing, vLLM samples
padding ids (so the test can fail)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from engine_adapters.vllm import VLLMEngine, VLLMServer, VLLMServerConfig
from engine_adapters_vllm_fixtures import VLLM_PYTHON, VLLM_ROUTING, requires_vllm_env
from rollout_core import SamplingParams, Segment

torch = pytest.importorskip("torch")
pytest.importorskip("native_engine")
from moe_models import build_char_tokenizer, load_pretrained, save_pretrained  # noqa: E402
from native_engine.testing import padding_rows_win, tiny_model  # noqa: E402

pytestmark = [pytest.mark.vllm, requires_vllm_env, pytest.mark.timeout(900)]

TOKENIZER = 120  # the char tokenizer below has 3 specials + 117 characters; the embedding has 128 rows
PROMPT = [5, 20, 33, 47, 60, 71, 8, 9]


def _checkpoint(folder: Path) -> Path:
    tokenizer = build_char_tokenizer([chr(c) for c in range(0x21, 0x21 + TOKENIZER - 3)])
    model = padding_rows_win(tiny_model(seed=2, vocab_size=128, eos_token_id=None, head_dim=32), TOKENIZER)
    return save_pretrained(model, folder, tokenizer)


def _generate(url: str, limit: int | None) -> list[Segment]:
    async def main() -> list[Segment]:
        engine = await VLLMEngine.connect(url, routing=VLLM_ROUTING)
        try:
            await engine.sample_only(limit)
            calls = [
                engine.generate(f"pad-{limit}-{i}", PROMPT, SamplingParams(max_new_tokens=12, seed=i)) for i in range(4)
            ]
            return list(await asyncio.gather(*calls))
        finally:
            await engine.close()

    return asyncio.run(main())


def test_vllm_never_samples_a_padding_row_once_told_the_tokenizers_size(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "padded")
    server = VLLMServer.launch(VLLMServerConfig(model=str(folder), python=VLLM_PYTHON, routing=VLLM_ROUTING))
    try:
        unlimited = _generate(server.base_url, None)
        limited = _generate(server.base_url, TOKENIZER)
    finally:
        server.stop()
    assert any(t >= TOKENIZER for s in unlimited for t in s.token_ids)
    assert all(t < TOKENIZER for s in limited for t in s.token_ids)
    model = load_pretrained(folder, vocab_size=TOKENIZER).eval()
    for seg in limited:
        with torch.no_grad():
            lp, _ = model.token_log_probs(torch.tensor([PROMPT + seg.token_ids]), None)
        np.testing.assert_allclose(seg.log_probs, lp[0, len(PROMPT) - 1 :].numpy(), atol=2e-3, rtol=0)
