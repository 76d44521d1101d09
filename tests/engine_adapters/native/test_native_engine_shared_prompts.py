"""A step that admits several requests with one prompt (a GRPO group) prefills it once and copies its keys and values
to the others' slots (`SharedPrompts`): each request gets what it gets when prefilled alone, bit for bit under
batch-invariant ops, with its own sampled tokens."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from engine_adapters.native import EngineConfig, NativeEngine
from engine_adapters.native import runner as runner_module
from engine_adapters.native.decode import KVCache
from engine_adapters.native.shared_prompts import SharedPrompts
from engine_adapters.native.testing import tiny_model
from moe_models import MoEConfig
from rollout_core import SamplingParams

PROMPTS = [[1, 5, 7, 9], [1, 3], [1, 5, 7, 9], [1, 5, 7, 9], [1, 3], [1, 5, 7]]


def test_repeated_chunks_map_to_their_first_occurrence() -> None:
    ids = torch.tensor([t for p in PROMPTS for t in p])
    shared = SharedPrompts.of(ids, [len(p) for p in PROMPTS])
    assert shared.repeats and shared.unique.tolist() == [0, 1, 5] and shared.source.tolist() == [0, 1, 0, 0, 1, 2]
    slots = torch.tensor([10, 11, 12, 13, 14, 15])
    unique_ids, unique_slots, lens = shared.unique_chunks(ids, slots)
    assert unique_ids.tolist() == [1, 5, 7, 9, 1, 3, 1, 5, 7] and unique_slots.tolist() == [10, 11, 15]
    assert lens == [4, 2, 3]
    assert shared.copies(slots) == [(10, 12, 4), (10, 13, 4), (11, 14, 2)]
    assert shared.expand_logits(torch.tensor([[0.0], [1.0], [2.0]])).flatten().tolist() == [0, 1, 0, 0, 1, 2]
    rows = shared.expand_rows(torch.arange(9))  # one row per distinct prompt token
    assert rows.tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert not SharedPrompts.of(torch.tensor([1, 2, 1, 3]), [2, 2]).repeats


def test_a_copied_prefix_holds_the_source_positions_and_length() -> None:
    config = MoEConfig.preset("tiny", vocab_size=16)
    cache = KVCache(config, num_slots=3, max_len=8)
    cache.key_storage.normal_()
    cache.value_storage.normal_()
    cache.lengths[0] = 5
    cache.copy_prefixes([(0, 2, 3)])
    assert int(cache.lengths[2]) == 3
    assert torch.equal(cache.key_storage[:, 2, :, :3], cache.key_storage[:, 0, :, :3])
    assert torch.equal(cache.value_storage[:, 2, :, :3], cache.value_storage[:, 0, :, :3])


def _generate(prompts: list[list[int]], together: bool) -> list:  # type: ignore[type-arg]
    engine = NativeEngine(tiny_model(), EngineConfig(slots=8, eos_token_ids=()), max_len=32, true_on_policy=True)

    def params(i: int) -> SamplingParams:
        return SamplingParams(max_new_tokens=6, seed=i)

    async def run() -> list:  # type: ignore[type-arg]
        if together:
            return list(await asyncio.gather(*(engine.generate(f"r{i}", p, params(i)) for i, p in enumerate(prompts))))
        return [await engine.generate(f"r{i}", p, params(i)) for i, p in enumerate(prompts)]

    return asyncio.run(run())


def test_requests_sharing_a_prefill_get_what_they_get_alone_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    original = SharedPrompts.of

    def recording(ids: torch.Tensor, lens: list[int]) -> SharedPrompts:
        seen.append(original(ids, lens).repeats)
        return original(ids, lens)

    monkeypatch.setattr(runner_module.SharedPrompts, "of", staticmethod(recording))
    together = _generate(PROMPTS, True)
    assert any(seen)  # some step prefilled repeats
    seen.clear()
    alone = _generate(PROMPTS, False)
    assert not any(seen)
    for a, b in zip(together, alone, strict=True):
        assert list(a.token_ids) == list(b.token_ids)
        assert list(a.log_probs) == list(b.log_probs)
        assert np.array_equal(a.routed_experts, b.routed_experts)
    assert len({tuple(s.token_ids) for s in together[:1] + together[2:4]}) > 1  # own seeds, own samples
