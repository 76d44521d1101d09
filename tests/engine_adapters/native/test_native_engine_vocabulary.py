"""The policy's vocabulary is the tokenizer's: on a checkpoint whose padding rows beyond the tokenizer carry the
largest logits, an engine told the tokenizer's size never samples them, and its log-probs (normalised over the
tokenizer's ids) equal the trainer's to the usual bound; told nothing, it samples nothing but padding (so the test can
fail)."""

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch
from engine_adapters.native import NativeEngine
from engine_adapters.native.testing import padding_rows_win, tiny_model
from moe_models import load_pretrained, save_pretrained
from rollout_core import SamplingParams, Segment

TOKENIZER = 120  # ids the tokenizer defines; the embedding has 128 rows
PROMPTS = [[5, 9, 33, 17], [70, 3, 3, 100, 41, 8, 2], [64]]


def _sample(engine: NativeEngine, temperature: float) -> list[Segment]:
    async def main() -> list[Segment]:
        calls = [
            engine.generate(f"r{i}", p, SamplingParams(max_new_tokens=16, temperature=temperature, seed=i))
            for i, p in enumerate(PROMPTS)
        ]
        return list(await asyncio.gather(*calls))

    return asyncio.run(main())


@pytest.mark.parametrize("temperature", [1.0, 0.0], ids=["sampled", "greedy"])
def test_an_engine_never_samples_the_rows_beyond_the_tokenizer(tmp_path: Path, temperature: float) -> None:
    save_pretrained(padding_rows_win(tiny_model(seed=1, eos_token_id=None), TOKENIZER), tmp_path)
    unlimited = NativeEngine.from_pretrained(tmp_path, max_len=64)
    assert all(t >= TOKENIZER for s in _sample(unlimited, temperature) for t in s.token_ids)
    engine = NativeEngine.from_pretrained(tmp_path, vocab_size=TOKENIZER, max_len=64)
    segments = _sample(engine, temperature)
    assert all(0 <= t < TOKENIZER for s in segments for t in s.token_ids)
    model = load_pretrained(tmp_path, vocab_size=TOKENIZER)
    for prompt, seg in zip(PROMPTS, segments, strict=True):
        ids = torch.tensor([prompt + seg.token_ids])
        with torch.no_grad():
            lp, _ = model.token_log_probs(ids, None)
        assert np.max(np.abs(np.asarray(seg.log_probs) - lp[0, len(prompt) - 1 :].numpy())) <= 1e-5
