"""The native engine on every supported family: its sampled log-probs and captured routing equal the training
forward's on the same tokens (replaying the captured routing in training reproduces it), in true on-policy mode bit
for bit; and the decode step serves exactly the families it computes (the others decode through the general cached
forward, and a compiled decode refuses them with the reason)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from engine_adapters.native import EngineConfig, NativeEngine
from engine_adapters.native.decode import decode_step_unsupported
from engine_adapters.native.testing import tiny_model
from moe_models import FAMILY_NAMES, MoEForCausalLM, RouterReplay
from rollout_core import SamplingParams

PROMPT_LENS = (3, 9, 16, 5, 12, 7)


def _family_model(family: str, seed: int = 0) -> MoEForCausalLM:
    """The tiny preset of `family` with every weight perturbed (biases, sinks and the correction bias nonzero)."""
    model = tiny_model(seed, model_type=family, max_position_embeddings=256)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.05)
    return model


def _generate(engine: NativeEngine, params: SamplingParams) -> tuple[list[list[int]], list]:  # type: ignore[type-arg]
    prompts = [[(11 * i + 7 * j) % 120 + 4 for j in range(n)] for i, n in enumerate(PROMPT_LENS)]

    async def main() -> list:  # type: ignore[type-arg]
        calls = (engine.generate(f"p{i}", p, params.replace(seed=100 + i)) for i, p in enumerate(prompts))
        return list(await asyncio.gather(*calls))

    return prompts, asyncio.run(main())


def _trainer_view(
    model: MoEForCausalLM, prompt: list[int], seg, replay_rows: np.ndarray | None = None, invariant: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    ids = torch.tensor([prompt + list(seg.token_ids)])  # [1, T]
    replay = None
    if replay_rows is not None:
        rows = torch.zeros((1, ids.shape[1], *replay_rows.shape[1:]), dtype=torch.int64)
        rows[0, : len(replay_rows)] = torch.from_numpy(replay_rows.astype(np.int64))
        mask = torch.zeros((1, ids.shape[1]), dtype=torch.bool)
        mask[0, : len(replay_rows)] = True
        replay = RouterReplay(ids=rows, mask=mask)
    with torch.no_grad():
        lp, routed = model.token_log_probs(
            ids, torch.ones_like(ids), replay=replay, capture_routing=True, invariant=invariant
        )
    return lp[0, len(prompt) - 1 :].numpy(), routed[0, :-1].numpy()


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_engine_log_probs_and_routing_match_the_training_forward(family: str) -> None:
    model = _family_model(family, seed=3)
    engine = NativeEngine(model, slots=4, max_len=64, eos_token_ids=())  # 6 prompts > 4 slots: queueing
    prompts, segs = _generate(engine, SamplingParams(max_new_tokens=20, temperature=1.0))
    for prompt, seg in zip(prompts, segs, strict=True):
        assert len(seg.token_ids) == 20
        assert seg.routed_experts.shape == (len(prompt) + 19, model.config.num_moe_layers, 2)
        trainer_lp, _ = _trainer_view(model, prompt, seg)
        assert np.max(np.abs(np.asarray(seg.log_probs) - trainer_lp)) <= 1e-5, family
        replayed_lp, rows = _trainer_view(model, prompt, seg, replay_rows=seg.routed_experts)
        np.testing.assert_array_equal(rows, seg.routed_experts.astype(np.int64))
        assert np.max(np.abs(np.asarray(seg.log_probs) - replayed_lp)) <= 1e-5, family


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_true_on_policy_engine_equals_the_trainer_bit_for_bit(family: str) -> None:
    model = _family_model(family, seed=4)
    engine = NativeEngine(model, EngineConfig(slots=3, eos_token_ids=()), max_len=64, true_on_policy=True)
    prompts, segs = _generate(engine, SamplingParams(max_new_tokens=9, temperature=1.0))
    rows = [prompt + list(seg.token_ids) for prompt, seg in zip(prompts, segs, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    with torch.no_grad():
        lp, routed = model.token_log_probs(ids, mask, capture_routing=True, invariant=True)
    for b, (prompt, seg) in enumerate(zip(prompts, segs, strict=True)):
        end = len(rows[b]) - 1
        assert torch.equal(lp[b, len(prompt) - 1 : end], torch.tensor(seg.log_probs, dtype=torch.float32)), family
        assert np.array_equal(routed[b, :end].numpy(), seg.routed_experts.astype(np.int64)), family


def test_the_decode_step_serves_the_families_it_computes() -> None:
    served = {f for f in FAMILY_NAMES if not decode_step_unsupported(tiny_model(model_type=f).config)}
    assert served == {"qwen3_moe", "qwen2_moe", "mixtral"}
    windowed = tiny_model(model_type="mixtral", sliding_window=8, layer_types=("sliding_attention",) * 4)
    assert "sliding" in decode_step_unsupported(windowed.config)


@pytest.mark.parametrize("family", ["deepseek_v3", "gpt_oss"])
def test_a_compiled_decode_refuses_a_family_it_does_not_compute_with_the_reason(family: str) -> None:
    with pytest.raises(ValueError, match=f"compiled decode got a {family} model: its (attention|experts)"):
        NativeEngine(tiny_model(model_type=family), EngineConfig(compile_decode=True))
