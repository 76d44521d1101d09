"""A padded batch is computed on its real tokens only (`TokenLayout`): what the padding cells hold cannot change a real
token's logits or routing (bitwise), real tokens match their rows run alone (to float rounding: a matmul's rounding
depends on its row count), padding cells are zeros; router replay and gradients follow the packed tokens."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models import MoEConfig, MoEForCausalLM, RouterReplay
from moe_models.token_layout import TokenLayout

CONFIG = MoEConfig.preset("tiny", vocab_size=32, pad_token_id=0)


def _model() -> MoEForCausalLM:
    torch.manual_seed(0)
    return MoEForCausalLM(CONFIG).eval()


def _padded(lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(1, CONFIG.vocab_size, (len(lengths), width), generator=gen)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask


def test_pack_then_unpack_restores_real_cells_and_zeroes_padding() -> None:
    ids, mask = _padded([3, 5, 1], seed=0)
    layout = TokenLayout.of(ids, mask)
    assert layout.num_tokens == 9 and layout.positions.tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0]
    values = torch.randn(3, 5, 4)
    back = layout.unpack(layout.pack(values))
    assert torch.equal(back[mask.bool()], values[mask.bool()]) and not back[~mask.bool()].any()


def test_a_full_mask_packs_as_a_view_of_every_cell() -> None:
    ids = torch.ones(2, 4, dtype=torch.int64)
    for mask in (None, torch.ones(2, 4)):
        layout = TokenLayout.of(ids, mask)
        assert layout.index is None and layout.num_tokens == 8
        assert layout.pack(ids).data_ptr() == ids.data_ptr()


@settings(max_examples=12, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4), seed=st.integers(0, 99))
def test_real_tokens_ignore_what_padding_holds_and_match_their_rows_alone(lengths: list[int], seed: int) -> None:
    model = _model()
    ids, mask = _padded(lengths, seed)
    junk = torch.where(mask.bool(), ids, torch.randint_like(ids, 1, CONFIG.vocab_size))  # other pad contents
    real = mask.bool()
    with torch.no_grad():
        out = model(ids, mask, capture_routing=True)
        other = model(junk, mask, capture_routing=True)
        assert torch.equal(out.logits, other.logits) and torch.equal(out.routed_experts, other.routed_experts)
        for b, n in enumerate(lengths):
            alone = model(ids[b : b + 1, :n], capture_routing=True)
            torch.testing.assert_close(out.logits[b, :n], alone.logits[0], rtol=0, atol=1e-5)
    assert not out.logits[~real].any() and not out.routed_experts[~real].any()


def test_replay_forces_the_recorded_experts_at_real_tokens_of_a_padded_batch() -> None:
    model = _model()
    ids, mask = _padded([6, 3], seed=1)
    ref = MoEForCausalLM(CONFIG)  # other weights: its routing differs from the model's own
    with torch.no_grad():
        recorded = ref(ids, mask, capture_routing=True).routed_experts
        replayed = model(ids, mask, replay=RouterReplay(recorded, mask.bool()), capture_routing=True)
        native = model(ids, mask, capture_routing=True).routed_experts
    real = mask.bool()
    assert torch.equal(replayed.routed_experts[real], recorded[real])
    assert not torch.equal(native[real], recorded[real])


def test_a_padded_batch_gives_the_gradient_of_its_rows_alone() -> None:
    lengths = [5, 2]
    ids, mask = _padded(lengths, seed=2)
    model = _model().train()
    model(ids, mask).logits[mask.bool()].sum().backward()
    packed = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    for b, n in enumerate(lengths):
        model(ids[b : b + 1, :n]).logits.sum().backward()
    for k, p in model.named_parameters():
        # A sum over tokens: rounding grows with the gradient. The router's gradient sums products of small terms
        # whose rounding follows the CPU's matmul kernels: 2.7e-7 of a largest 0.13 on an AVX2 CPU (1e-6 held on
        # AVX-512), so the bound is 1e-5 of the largest.
        scale = float(p.grad.abs().max())
        torch.testing.assert_close(packed[k], p.grad, rtol=1e-5, atol=1e-5 * scale, msg=k)


def test_logits_from_computes_the_wanted_positions_and_zeroes_the_others() -> None:
    model = _model()
    ids, mask = _padded([7, 4, 6], seed=3)
    first = torch.tensor([3, 0, 5])
    recorded = MoEForCausalLM(CONFIG)(ids, mask, capture_routing=True).routed_experts.detach()
    replay = RouterReplay(recorded, mask.bool())
    with torch.no_grad():
        for routing in (None, replay):
            full = model(ids, mask, replay=routing).logits
            part = model(ids, mask, replay=routing, logits_from=first).logits
            wanted = mask.bool() & (torch.arange(ids.shape[1])[None, :] >= first[:, None])
            torch.testing.assert_close(part[wanted], full[wanted], rtol=0, atol=1e-6)
            assert not part[~wanted].any()


def test_routing_capture_refuses_a_partial_last_layer() -> None:
    ids, mask = _padded([3, 2], seed=4)
    with pytest.raises(ValueError, match="capture_routing"):
        _model()(ids, mask, capture_routing=True, logits_from=torch.tensor([1, 1]))
