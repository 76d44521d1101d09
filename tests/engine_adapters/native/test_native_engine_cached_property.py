"""Property: any schedule of chunked appends across slots reproduces the uncached forward."""

from __future__ import annotations

import torch
from engine_adapters.native.decode import CachedModel, KVCache
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models import MoEConfig, MoEForCausalLM

CONFIG = MoEConfig.preset("tiny", vocab_size=29, num_hidden_layers=2, num_key_value_heads=1)
torch.manual_seed(0)
MODEL = MoEForCausalLM(CONFIG).eval()
CACHED = CachedModel(MODEL)
MAX_LEN = 12


@st.composite
def schedules(draw: st.DrawFn) -> tuple[list[list[int]], list[int], list[list[dict[int, int]]]]:
    """Returns (sequences, slot per sequence, calls); a call maps sequence index -> chunk length."""
    num = draw(st.integers(1, 3))
    seqs = [draw(st.lists(st.integers(0, 28), min_size=1, max_size=MAX_LEN)) for _ in range(num)]
    slots = draw(st.permutations(list(range(4))))[:num]
    done = [0] * num
    calls: list[dict[int, int]] = []
    while any(d < len(s) for d, s in zip(done, seqs, strict=True)):
        call: dict[int, int] = {}
        alive = [i for i, seq in enumerate(seqs) if done[i] < len(seq)]
        for i in alive:
            # the first alive sequence always advances, so every call is non-empty and the loop ends
            if i == alive[0] or draw(st.booleans()):
                call[i] = draw(st.integers(1, len(seqs[i]) - done[i]))
                done[i] += call[i]
        calls.append(call)
    return seqs, slots, [calls]


@settings(max_examples=12, deadline=None)
@given(schedules())
def test_any_chunk_schedule_matches_uncached_forward(case: tuple) -> None:
    seqs, slots, (calls,) = case
    cache = KVCache(CONFIG, num_slots=4, max_len=MAX_LEN)
    done = [0] * len(seqs)
    with torch.inference_mode():
        full = [MODEL(torch.tensor([s]), capture_routing=True) for s in seqs]
        for call in calls:
            order = sorted(call)
            chunks = [seqs[i][done[i] : done[i] + call[i]] for i in order]
            logits, routed = CACHED.forward(
                torch.tensor([t for c in chunks for t in c]),
                torch.tensor([slots[i] for i in order]),
                [call[i] for i in order],
                cache,
                capture_routing=True,
            )
            offset = 0
            for row, i in enumerate(order):
                end = done[i] + call[i]
                assert (logits[row] - full[i].logits[0, end - 1]).abs().max().item() <= 1e-5
                assert routed[offset : offset + call[i]].equal(full[i].routed_experts[0, done[i] : end])
                offset += call[i]
                done[i] = end
    assert [cache.length(slots[i]) for i in range(len(seqs))] == [len(s) for s in seqs]
