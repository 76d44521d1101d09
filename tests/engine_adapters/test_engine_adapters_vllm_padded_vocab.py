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
from engine_adapters.native.testing import padding_rows_win, tiny_model  # noqa: E402
from moe_models import build_char_tokenizer, load_pretrained, save_pretrained  # noqa: E402

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


def test_vllm_serves_the_policy_a_default_sync_ppo_run_exports(tmp_path: Path) -> None:
    """`apps/sync_ppo --run.steps 2` at its defaults; the final checkpoint's `policy/` loads in transformers with our
    logits (1e-5) and vLLM serves it: greedy tokens equal our engine's, log-probs to the adapter's bound."""
    import os
    import subprocess
    import sys

    transformers = pytest.importorskip("transformers")
    from engine_adapters.native import NativeEngine

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    argv = [sys.executable, str(root / "apps" / "sync_ppo"), "--run.steps", "2", "--run.dir", str(tmp_path / "run"),
            "--run.progress", "false"]  # fmt: skip
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    policy = tmp_path / "run" / "checkpoints" / "2" / "policy"
    ours = load_pretrained(policy).eval()
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(policy), dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(policy))
    text = tokenizer.apply_chat_template([{"role": "user", "content": "sort:31415="}], add_generation_prompt=True,
                                         tokenize=False)  # fmt: skip
    prompt = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        torch.testing.assert_close(
            hf(torch.tensor([prompt])).logits, ours(torch.tensor([prompt])).logits, atol=1e-5, rtol=0
        )
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)

    async def ours_greedy() -> Segment:
        return await NativeEngine(ours, max_len=64).generate("ours", prompt, greedy)

    async def served_greedy(url: str) -> Segment:
        engine = await VLLMEngine.connect(url, routing=VLLM_ROUTING)
        try:
            return await engine.generate("served", prompt, greedy)
        finally:
            await engine.close()

    want = asyncio.run(ours_greedy())
    server = VLLMServer.launch(VLLMServerConfig(model=str(policy), python=VLLM_PYTHON, routing=VLLM_ROUTING))
    try:
        got = asyncio.run(served_greedy(server.base_url))
    finally:
        server.stop()
    assert got.token_ids == want.token_ids and got.stop_reason == want.stop_reason
    np.testing.assert_allclose(got.log_probs, want.log_probs, atol=2e-3, rtol=0)
