"""`CachedModel.forward` (the engine's hot path) reproduces the model's uncached forward and keeps slot
bookkeeping."""

from __future__ import annotations

import pytest
import torch
from engine_adapters.native.decode import CachedModel, KVCache
from moe_models import MoEConfig, MoEForCausalLM

TOL = 1e-5
CONFIG = MoEConfig.preset("tiny", vocab_size=53, num_hidden_layers=3, mlp_only_layers=(0,))


def _model(seed: int = 0) -> MoEForCausalLM:
    torch.manual_seed(seed)
    return MoEForCausalLM(CONFIG).eval()


def test_prefill_then_decode_in_several_slots_matches_uncached_forward() -> None:
    model = _model()
    cached = CachedModel(model)
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 53, (n,), generator=gen) for n in (9, 14, 6, 11)]
    slots = [3, 0, 5, 1]
    prompt_lens = [4, 7, 1, 5]
    cache = KVCache(CONFIG, num_slots=6, max_len=20)
    routed_rows: list[list[torch.Tensor]] = [[] for _ in seqs]
    logits_rows: list[list[torch.Tensor]] = [[] for _ in seqs]
    with torch.inference_mode():
        # prefill two slots together, the other two in a mixed call with nothing else
        for group in ([0, 1], [2, 3]):
            chunk = torch.cat([seqs[i][: prompt_lens[i]] for i in group])
            logits, routed = cached.forward(
                chunk,
                torch.tensor([slots[i] for i in group]),
                [prompt_lens[i] for i in group],
                cache,
                capture_routing=True,
            )
            offset = 0
            for row, i in enumerate(group):
                routed_rows[i].append(routed[offset : offset + prompt_lens[i]])
                logits_rows[i].append(logits[row])
                offset += prompt_lens[i]
        pos = list(prompt_lens)
        while any(p < len(s) for p, s in zip(pos, seqs, strict=True)):
            # alive rows decode one token; a row short of its prompt would be a prefill chunk in a real engine
            alive = [i for i in range(4) if pos[i] < len(seqs[i])]
            tokens = torch.stack([seqs[i][pos[i]] for i in alive])
            logits, routed = cached.forward(
                tokens, torch.tensor([slots[i] for i in alive]), [1] * len(alive), cache, capture_routing=True
            )
            for row, i in enumerate(alive):
                routed_rows[i].append(routed[row : row + 1])
                logits_rows[i].append(logits[row])
                pos[i] += 1
        for i, seq in enumerate(seqs):
            full = model(seq[None], capture_routing=True)
            expected_logits = full.logits[0, prompt_lens[i] - 1 :]
            assert torch.cat(routed_rows[i]).equal(full.routed_experts[0])
            got = torch.stack(logits_rows[i])
            assert got.dtype == torch.float32
            assert (got - expected_logits).abs().max().item() <= TOL
            assert cache.length(slots[i]) == len(seq)


def test_mixed_prefill_and_decode_in_one_call_matches_uncached_forward() -> None:
    model = _model(2)
    cached = CachedModel(model)
    gen = torch.Generator().manual_seed(3)
    a, b, c = (torch.randint(0, 53, (n,), generator=gen) for n in (8, 6, 5))
    cache = KVCache(CONFIG, num_slots=3, max_len=16)
    with torch.inference_mode():
        cached.forward(a[:7], torch.tensor([0]), [7], cache)
        cached.forward(b[:2], torch.tensor([1]), [2], cache)
        # slot 0 decodes one token, slot 1 appends a 4-token chunk, slot 2 starts a 5-token prefill
        logits, routed = cached.forward(
            torch.cat([a[7:], b[2:], c]), torch.tensor([0, 1, 2]), [1, 4, 5], cache, capture_routing=True
        )
        for row, (seq, n) in enumerate(((a, 1), (b, 4), (c, 5))):
            full = model(seq[None], capture_routing=True)
            assert (logits[row] - full.logits[0, -1]).abs().max().item() <= TOL
            offset = [0, 1, 5][row]
            assert routed[offset : offset + n].equal(full.routed_experts[0, -n:])
    assert cache.lengths.tolist() == [8, 6, 5]


def test_chunk_that_overflows_max_len_raises_and_changes_nothing() -> None:
    model = _model()
    cached = CachedModel(model)
    cache = KVCache(CONFIG, num_slots=2, max_len=6)
    with torch.inference_mode():
        cached.forward(torch.arange(5), torch.tensor([1]), [5], cache)
        with pytest.raises(ValueError, match="max_len"):
            cached.forward(torch.arange(3), torch.tensor([0, 1]), [1, 2], cache)
    assert cache.lengths.tolist() == [0, 5]


def test_reset_frees_the_slot_for_a_new_sequence() -> None:
    model = _model()
    cached = CachedModel(model)
    cache = KVCache(CONFIG, num_slots=1, max_len=8)
    first = torch.tensor([5, 9, 2, 7, 1, 3])
    second = torch.tensor([4, 4, 8])
    with torch.inference_mode():
        cached.forward(first, torch.tensor([0]), [6], cache)
        with pytest.raises(ValueError):
            cached.forward(second, torch.tensor([0]), [3], cache)
        cache.reset(0)
        assert cache.length(0) == 0
        logits, _ = cached.forward(second, torch.tensor([0]), [3], cache)
        expected = model(second[None]).logits[0, -1]
    assert (logits[0] - expected).abs().max().item() <= TOL
    assert cache.length(0) == 3


@pytest.mark.parametrize(
    ("ids", "slots", "lens", "match"),
    [
        (torch.arange(3), torch.tensor([0, 0]), [1, 2], "distinct"),
        (torch.arange(3), torch.tensor([0, 1]), [1, 1], "sum"),
        (torch.arange(3), torch.tensor([0, 4]), [1, 2], "distinct slots"),
        (torch.arange(2), torch.tensor([0]), [2, 0], "entries"),
    ],
)
def test_malformed_cached_call_raises(ids: torch.Tensor, slots: torch.Tensor, lens: list[int], match: str) -> None:
    cache = KVCache(CONFIG, num_slots=2, max_len=8)
    with torch.inference_mode(), pytest.raises(ValueError, match=match):
        CachedModel(_model()).forward(ids, slots, lens, cache)


def test_capture_routing_off_returns_none() -> None:
    cache = KVCache(CONFIG, num_slots=1, max_len=4)
    with torch.inference_mode():
        _, routed = CachedModel(_model()).forward(torch.arange(2), torch.tensor([0]), [2], cache)
    assert routed is None


def test_cached_forward_records_no_gradients_even_with_grad_enabled() -> None:
    model = CachedModel(MoEForCausalLM(CONFIG))
    cache = KVCache(CONFIG, num_slots=1, max_len=4)
    logits, _ = model.forward(torch.arange(3), torch.tensor([0]), [3], cache)
    assert not logits.requires_grad
    assert not any(k.requires_grad for k in cache.keys)
