"""True on-policy mode: the engine samples with batch-invariant ops, so the trainer's recompute of every sampled
token (its padded batch, with autograd) equals the engine's log-prob and routing bit for bit, across batches,
prompt lengths, slots and a weight update."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from engine_adapters.native import EngineConfig, NativeEngine
from engine_adapters.native.testing import tiny_model
from rollout_core import SamplingParams

PROMPTS = [[1, 5, 7, 9], [1, 3], [1, 8, 8, 8, 2, 4, 6], [1, 2]]


def _generate(engine: NativeEngine, tag: str, temperature: float) -> list:  # type: ignore[type-arg]
    async def run() -> list:  # type: ignore[type-arg]
        calls = [
            engine.generate(f"{tag}{i}", p, SamplingParams(max_new_tokens=9, temperature=temperature, seed=i))
            for i, p in enumerate(PROMPTS)
        ]
        return list(await asyncio.gather(*calls))

    return asyncio.run(run())


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_trainer_recompute_equals_the_sampled_log_probs_and_routing_bit_for_bit(temperature: float):
    model = tiny_model()
    engine = NativeEngine(model, EngineConfig(slots=3, eos_token_ids=()), max_len=32, true_on_policy=True)
    for round_ in range(2):
        segments = _generate(engine, f"r{round_}-", temperature)
        rows = [prompt + list(seg.token_ids) for prompt, seg in zip(PROMPTS, segments, strict=True)]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        lp, routed = model.token_log_probs(ids, mask, temperature=temperature, capture_routing=True, invariant=True)
        for b, (prompt, seg) in enumerate(zip(PROMPTS, segments, strict=True)):
            end = len(rows[b]) - 1
            assert torch.equal(lp[b, len(prompt) - 1 : end].detach(), torch.tensor(seg.log_probs, dtype=torch.float32))
            assert np.array_equal(routed[b, :end].numpy(), seg.routed_experts.astype(np.int64))
        asyncio.run(engine.update_weights({k: v * 1.01 for k, v in model.state_dict().items()}, round_ + 1))


def test_true_on_policy_refuses_a_compiled_or_low_precision_engine():
    with pytest.raises(ValueError, match="true_on_policy"):
        NativeEngine(tiny_model(), EngineConfig(compile_decode=True), true_on_policy=True)
    with pytest.raises(ValueError, match="true_on_policy"):
        NativeEngine(tiny_model(), EngineConfig(dtype="bfloat16"), true_on_policy=True)
