"""Engine log-probs and routing equal the trainer's (`token_log_probs`) on the same tokens, and replay agrees."""

import asyncio

import numpy as np
import pytest
import torch
from engine_adapters.native import NativeEngine
from engine_adapters.native.testing import tiny_model
from moe_models import RouterReplay
from rollout_core import SamplingParams

PROMPT_LENS = (3, 9, 16, 5, 12, 7)


def _generate_batch(engine: NativeEngine, params: SamplingParams):
    prompts = [[(11 * i + 7 * j) % 120 + 4 for j in range(n)] for i, n in enumerate(PROMPT_LENS)]

    async def main():
        return await asyncio.gather(
            *(engine.generate(f"p{i}", p, params.replace(seed=100 + i)) for i, p in enumerate(prompts))
        )

    return prompts, asyncio.run(main())


def _trainer_view(model, prompt, seg, temperature, replay_rows=None):
    ids = torch.tensor([prompt + seg.token_ids])  # [1, T]
    replay = None
    if replay_rows is not None:
        rows = torch.zeros((1, ids.shape[1], *replay_rows.shape[1:]), dtype=torch.int64)
        rows[0, : len(replay_rows)] = torch.from_numpy(replay_rows.astype(np.int64))
        mask = torch.zeros((1, ids.shape[1]), dtype=torch.bool)
        mask[0, : len(replay_rows)] = True
        replay = RouterReplay(ids=rows, mask=mask)
    with torch.no_grad():
        lp, routed = model.token_log_probs(
            ids, torch.ones_like(ids), temperature=temperature, replay=replay, capture_routing=True
        )
    c = len(prompt)
    return lp[0, c - 1 :].numpy(), routed[0, :-1].numpy()  # log-probs of generated tokens, rows 0..T-2


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, 0, 1.0), (0.7, 20, 0.9), (1.3, 5, 1.0), (0.0, 0, 1.0)],
    ids=["plain", "T0.7-topk-topp", "T1.3-topk", "greedy"],
)
def test_native_engine_log_probs_match_trainer_log_probs(temperature, top_k, top_p):
    model = tiny_model(seed=3)
    engine = NativeEngine(model, slots=4, max_len=128, eos_token_ids=())  # 6 prompts > 4 slots: queueing
    params = SamplingParams(max_new_tokens=24, temperature=temperature, top_k=top_k, top_p=top_p)
    prompts, segs = _generate_batch(engine, params)
    trainer_temperature = temperature if temperature > 0 else 1.0  # greedy reports raw-logit log-probs
    for prompt, seg in zip(prompts, segs, strict=True):
        assert len(seg.token_ids) == 24
        trainer_lp, trainer_rows = _trainer_view(model, prompt, seg, trainer_temperature)
        assert np.max(np.abs(np.asarray(seg.log_probs) - trainer_lp)) <= 1e-5
        np.testing.assert_array_equal(seg.routed_experts.astype(np.int64), trainer_rows)


def test_native_engine_routing_replayed_in_trainer_gives_same_routing_and_log_probs():
    model = tiny_model(seed=4)
    engine = NativeEngine(model, slots=8, max_len=128, eos_token_ids=())
    params = SamplingParams(max_new_tokens=20, temperature=0.8)
    prompts, segs = _generate_batch(engine, params)
    for prompt, seg in zip(prompts, segs, strict=True):
        assert seg.routed_experts.dtype == np.uint8 and seg.routed_experts_start == 0
        lp, rows = _trainer_view(model, prompt, seg, 0.8, replay_rows=seg.routed_experts)
        np.testing.assert_array_equal(rows, seg.routed_experts.astype(np.int64))
        assert np.max(np.abs(np.asarray(seg.log_probs) - lp)) <= 1e-5


def test_native_engine_replaying_other_weights_routing_changes_trainer_log_probs():
    """The replay path is live: routing captured under different weights moves the trainer's log-probs."""
    model, other = tiny_model(seed=5), tiny_model(seed=6)
    params = SamplingParams(max_new_tokens=16, temperature=1.0)
    prompts, segs = _generate_batch(NativeEngine(model, slots=8, max_len=128, eos_token_ids=()), params)
    _, other_segs = _generate_batch(NativeEngine(other, slots=8, max_len=128, eos_token_ids=()), params)
    prompt, seg = prompts[2], segs[2]
    foreign = other_segs[2].routed_experts[: len(seg.routed_experts)]
    native_lp, _ = _trainer_view(model, prompt, seg, 1.0)
    replayed_lp, _ = _trainer_view(model, prompt, seg, 1.0, replay_rows=foreign)
    assert np.max(np.abs(native_lp - replayed_lp)) > 1e-3


@pytest.mark.slow
def test_compiled_engine_log_probs_and_routing_match_the_trainer_with_and_without_replay():
    model = tiny_model(seed=3)
    engine = NativeEngine(model, slots=4, max_len=128, eos_token_ids=(), compile_decode=True)
    prompts, segs = _generate_batch(engine, SamplingParams(max_new_tokens=24, temperature=1.0))
    for prompt, seg in zip(prompts, segs, strict=True):
        for replay_rows in (None, seg.routed_experts):
            trainer_lp, trainer_rows = _trainer_view(model, prompt, seg, 1.0, replay_rows=replay_rows)
            assert np.max(np.abs(np.asarray(seg.log_probs) - trainer_lp)) <= 1e-5
            np.testing.assert_array_equal(seg.routed_experts.astype(np.int64), trainer_rows)
