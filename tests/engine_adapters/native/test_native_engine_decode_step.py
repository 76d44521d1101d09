"""The decode step of `CachedModel.forward` (every chunk one token) reproduces the model's uncached forward, in
eager and compiled (`CachedModel(compiled=True)`, marked slow: each cache length compiles its own graph) alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_adapters.native.decode import CachedModel, KVCache
from moe_models import MoEConfig, MoEForCausalLM, load_state_dict_numpy, state_dict_numpy

TOL = 1e-5
CONFIG = MoEConfig.preset("tiny", vocab_size=61, num_hidden_layers=3, mlp_only_layers=(1,))


EAGER_AND_COMPILED = pytest.mark.parametrize(
    "compiled", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"]
)


def _model(seed: int = 0, config: MoEConfig = CONFIG) -> MoEForCausalLM:
    torch.manual_seed(seed)
    return MoEForCausalLM(config).eval()


def _cached(seed: int = 0, config: MoEConfig = CONFIG, compiled: bool = False) -> CachedModel:
    return CachedModel(_model(seed, config), compiled=compiled)


def _decode_and_compare(
    cached: CachedModel, cache: KVCache, seqs: list[torch.Tensor], slots: list[int], prompt_len: int
) -> None:
    """Prefills every sequence's first prompt_len tokens into its slot, then decodes the rest one token per call
    for all rows together; checks every decode call's logits and routing against the uncached forward."""
    with torch.inference_mode():
        for seq, slot in zip(seqs, slots, strict=True):
            cached.forward(seq[:prompt_len], torch.tensor([slot]), [prompt_len], cache)
        full = [cached.model(seq[None], capture_routing=True) for seq in seqs]
        for pos in range(prompt_len, len(seqs[0])):
            tokens = torch.stack([seq[pos] for seq in seqs])
            logits, routed = cached.forward(tokens, torch.tensor(slots), [1] * len(slots), cache, capture_routing=True)
            for row, ref in enumerate(full):
                assert (logits[row] - ref.logits[0, pos]).abs().max().item() <= TOL
                assert routed[row].equal(ref.routed_experts[0, pos])
    assert [cache.length(s) for s in slots] == [len(seqs[0])] * len(slots)


@EAGER_AND_COMPILED
@pytest.mark.parametrize(
    ("slots", "num_slots"),
    [
        ([0, 1, 2], 3),  # the batch is exactly a slot range of one length: keys read in place, nothing masked
        ([2, 0, 1], 3),  # a permuted whole range of one length: queries scattered, nothing masked
        ([4, 1, 2], 6),  # a permuted range with a gap: queries scattered into the range
        ([0, 15], 16),  # far-apart slots: keys copied out of the cache
    ],
)
def test_decode_calls_match_uncached_forward_for_any_slot_layout(
    slots: list[int], num_slots: int, compiled: bool
) -> None:
    gen = torch.Generator().manual_seed(len(slots) + num_slots)
    seqs = [torch.randint(0, CONFIG.vocab_size, (9,), generator=gen) for _ in slots]
    cache = KVCache(CONFIG, num_slots=num_slots, max_len=12)
    _decode_and_compare(_cached(1, compiled=compiled), cache, seqs, slots, prompt_len=3)


@EAGER_AND_COMPILED
def test_decode_rows_with_different_lengths_see_only_their_own_prefix(compiled: bool) -> None:
    cached = _cached(2, compiled=compiled)
    model = cached.model
    gen = torch.Generator().manual_seed(5)
    long, short = torch.randint(0, 61, (10,), generator=gen), torch.randint(0, 61, (4,), generator=gen)
    cache = KVCache(CONFIG, num_slots=2, max_len=12)
    with torch.inference_mode():
        cached.forward(long[:9], torch.tensor([0]), [9], cache)
        cached.forward(short[:3], torch.tensor([1]), [3], cache)
        logits, _ = cached.forward(torch.stack([long[9], short[3]]), torch.tensor([0, 1]), [1, 1], cache)
        for row, seq in enumerate((long, short)):
            assert (logits[row] - model(seq[None]).logits[0, -1]).abs().max().item() <= TOL
    assert cache.lengths.tolist() == [10, 4]


@EAGER_AND_COMPILED
def test_decode_uses_weights_loaded_in_place_after_a_previous_decode(compiled: bool) -> None:
    cached = _cached(3, compiled=compiled)
    model = cached.model
    cache = KVCache(CONFIG, num_slots=1, max_len=8)
    seq = torch.tensor([5, 9, 2, 7, 1])
    rng = np.random.default_rng(0)
    pushed = {k: v + rng.normal(0, 0.05, v.shape).astype(v.dtype) for k, v in state_dict_numpy(model).items()}
    with torch.inference_mode():
        cached.forward(seq[:3], torch.tensor([0]), [3], cache)
        cached.forward(seq[3:4], torch.tensor([0]), [1], cache)  # builds the fused decode weights
        load_state_dict_numpy(model, pushed)
        cache.reset(0)
        cached.forward(seq[:4], torch.tensor([0]), [4], cache)
        logits, _ = cached.forward(seq[4:], torch.tensor([0]), [1], cache)
        expected = model(seq[None]).logits[0, -1]
    assert (logits[0] - expected).abs().max().item() <= TOL


@EAGER_AND_COMPILED
def test_decode_into_a_full_slot_raises_and_changes_nothing(compiled: bool) -> None:
    cached = _cached(compiled=compiled)
    cache = KVCache(CONFIG, num_slots=2, max_len=4)
    with torch.inference_mode():
        cached.forward(torch.arange(4), torch.tensor([1]), [4], cache)
        cached.forward(torch.arange(2), torch.tensor([0]), [2], cache)
        keys = [k.clone() for k in cache.keys]
        with pytest.raises(ValueError, match="slot 1: got 4 cached \\+ 1 new token"):
            cached.forward(torch.arange(2), torch.tensor([0, 1]), [1, 1], cache)
    assert cache.lengths.tolist() == [2, 4]
    assert all(a.equal(b) for a, b in zip(keys, cache.keys, strict=True))


@EAGER_AND_COMPILED
def test_decode_with_a_bfloat16_cache_stays_close_to_the_fp32_forward(compiled: bool) -> None:
    cached = _cached(4, compiled=compiled)
    model = cached.model
    seq = torch.tensor([3, 8, 13, 21, 34, 55, 2, 1])
    cache = KVCache(CONFIG, num_slots=1, max_len=8, dtype=torch.bfloat16)
    with torch.inference_mode():
        cached.forward(seq[:4], torch.tensor([0]), [4], cache)
        rows = [cached.forward(seq[i : i + 1], torch.tensor([0]), [1], cache)[0][0] for i in range(4, 8)]
        expected = model(seq[None]).logits[0, 4:]
    assert (torch.stack(rows) - expected).abs().max().item() <= 1e-2


def test_compiled_decode_refuses_a_model_off_cpu() -> None:
    model = _model().to("meta")
    with pytest.raises(ValueError, match="got a model on meta, expected cpu"):
        CachedModel(model, compiled=True)
    assert not CachedModel(model).compiled  # an eager CachedModel takes a model on any device


@pytest.mark.parametrize("threads", [0, True, 1.5])
def test_kernel_threads_must_be_a_positive_int(threads: object) -> None:
    with pytest.raises(ValueError, match="kernel_threads got"):
        CachedModel(_model(), kernel_threads=threads)  # type: ignore[arg-type]


@pytest.mark.slow
def test_compiled_decode_serves_new_models_and_new_weights_without_compiling_again() -> None:
    from torch._dynamo.utils import counters

    config = CONFIG.replace(num_hidden_layers=2, mlp_only_layers=())  # a shape no other test compiles
    seq = torch.tensor([4, 9, 16, 25, 36, 49])

    def last_logits(cached: CachedModel) -> torch.Tensor:
        cache = KVCache(config, num_slots=3, max_len=10)
        with torch.inference_mode():
            cached.forward(torch.cat([seq[:4]] * 2), torch.tensor([2, 0]), [4, 4], cache)
            cached.forward(torch.stack([seq[4]] * 2), torch.tensor([2, 0]), [1, 1], cache)
            logits, _ = cached.forward(torch.stack([seq[5]] * 2), torch.tensor([2, 0]), [1, 1], cache)
        return logits

    last_logits(_cached(5, config, compiled=True))  # compiles the graph of this shape
    graphs = counters["stats"]["unique_graphs"]
    other = _cached(6, config, compiled=True)
    for _ in range(2):
        got = last_logits(other)
        with torch.inference_mode():
            expected = other.model(seq[None]).logits[0, -1]
        assert (got - expected).abs().max().item() <= TOL
        load_state_dict_numpy(other.model, state_dict_numpy(_model(7, config)))  # new weights, same tensors
    assert counters["stats"]["unique_graphs"] == graphs


@pytest.mark.slow
@pytest.mark.parametrize(("cache_dtype", "kernel_calls"), [(torch.float32, True), (torch.bfloat16, False)])
def test_compiled_decode_runs_attention_and_experts_in_the_c_kernels_for_fp32_only(
    cache_dtype: torch.dtype, kernel_calls: bool
) -> None:
    cached = _cached(8, compiled=True)
    cache = KVCache(CONFIG, num_slots=2, max_len=8, dtype=cache_dtype)
    with torch.inference_mode():
        cached.forward(torch.arange(6), torch.tensor([0, 1]), [3, 3], cache)  # prefill runs the eager cached forward
        cached.forward(torch.tensor([4, 5]), torch.tensor([0, 1]), [1, 1], cache)  # compiles (traces the ops too)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            cached.forward(torch.tensor([6, 7]), torch.tensor([0, 1]), [1, 1], cache)
    names = [event.name for event in prof.events()]
    calls = {op: names.count(f"native_engine::{op}") for op in ("decode_attention", "moe_experts")}
    moe_layers = CONFIG.num_hidden_layers - len(CONFIG.mlp_only_layers)
    expected = (CONFIG.num_hidden_layers, moe_layers) if kernel_calls else (0, 0)
    assert (calls["decode_attention"], calls["moe_experts"]) == expected


def test_compiled_prefill_runs_the_experts_kernel_and_matches_the_forward() -> None:
    cached = _cached(9, compiled=True)  # prefill compiles nothing: its MoE layers use the C experts kernel (fp32)
    model = cached.model
    gen = torch.Generator().manual_seed(9)
    seqs = [torch.randint(0, CONFIG.vocab_size, (n,), generator=gen) for n in (7, 3, 12)]
    cache = KVCache(CONFIG, num_slots=4, max_len=16)
    with torch.inference_mode():
        logits, routed = cached.forward(
            torch.cat(seqs), torch.tensor([3, 0, 1]), [len(s) for s in seqs], cache, capture_routing=True
        )
        for row, (seq, rows) in enumerate(zip(seqs, routed.split([len(s) for s in seqs]), strict=True)):
            ref = model(seq[None], capture_routing=True)
            assert (logits[row] - ref.logits[0, -1]).abs().max().item() <= TOL
            assert rows.equal(ref.routed_experts[0])


def test_cache_write_tokens_stores_each_layers_token_at_its_slot_and_position() -> None:
    cache = KVCache(CONFIG, num_slots=3, max_len=5)
    slots, positions = torch.tensor([2, 0]), torch.tensor([4, 1])
    keys = torch.randn(CONFIG.num_hidden_layers, 2, CONFIG.num_key_value_heads, CONFIG.head_dim)
    cache.write_tokens(slots, positions, keys, -keys)
    for layer in range(CONFIG.num_hidden_layers):
        for row, (slot, pos) in enumerate(zip(slots.tolist(), positions.tolist(), strict=True)):
            assert cache.keys[layer][slot, :, pos].equal(keys[layer, row])
            assert cache.values[layer][slot, :, pos].equal(-keys[layer, row])
    assert int((cache.key_storage != 0).sum()) == keys.numel()  # nothing else written
    assert cache.lengths.tolist() == [0, 0, 0]
