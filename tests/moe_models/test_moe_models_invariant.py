"""The batch-invariant forward: a position's result does not depend on what follows it, on the other sequences of
the batch, on padding or on autograd, and it is the model's own function (equal to the normal forward up to float
rounding)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models import MoEConfig, MoEForCausalLM, RouterReplay
from moe_models.invariant_ops import invariant_attention, invariant_experts, invariant_linear
from moe_models.moe import Experts
from moe_models.shared_prefix import prefix_owners


def _model() -> MoEForCausalLM:
    torch.manual_seed(0)
    return MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=48)).eval()


IDS = [1, 7, 3, 44, 9, 9, 2, 30, 5, 11, 6, 17, 40, 2, 8, 8, 31, 12, 3, 19, 25, 4]


def _alone(model: MoEForCausalLM, ids: list[int], temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    lp, routed = model.token_log_probs(
        torch.tensor([ids]), None, temperature=temperature, capture_routing=True, invariant=True
    )
    return lp[0], routed[0]


def test_a_prefix_gives_bitwise_the_log_probs_and_routing_of_the_whole_sequence_there():
    model = _model()
    with torch.no_grad():
        whole, routed = _alone(model, IDS)
        for cut in (2, 6, 17):
            part, routed_part = _alone(model, IDS[:cut])
            assert torch.equal(whole[: cut - 1], part)
            assert torch.equal(routed[:cut], routed_part)


def test_a_sequence_in_a_padded_batch_gets_bitwise_its_values_alone():
    model = _model()
    rows = [IDS[:9], IDS, IDS[3:8], IDS[5:]]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    with torch.no_grad():
        lp, routed = model.token_log_probs(ids, mask, temperature=0.7, capture_routing=True, invariant=True)
        for b, r in enumerate(rows):
            alone, routed_alone = _alone(model, r, 0.7)
            assert torch.equal(lp[b, : len(r) - 1], alone)
            assert torch.equal(routed[b, : len(r)], routed_alone)


def test_autograd_does_not_change_a_bit_and_gradients_flow():
    model = _model()
    ids = torch.tensor([IDS])
    with torch.no_grad():
        plain, _ = model.token_log_probs(ids, None, temperature=0.7, invariant=True)
    graded, _ = model.token_log_probs(ids, None, temperature=0.7, invariant=True)
    assert torch.equal(plain, graded.detach())
    graded.sum().backward()
    assert model.lm_head.weight.grad is not None
    assert model.model.layers[1].mlp.experts.gate_up_proj.grad.abs().sum() > 0
    assert model.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_the_invariant_forward_is_the_model_up_to_rounding():
    model = _model()
    ids = torch.tensor([IDS])
    with torch.no_grad():
        normal, routed = model.token_log_probs(ids, None, capture_routing=True)
        invariant, inv_routed = model.token_log_probs(ids, None, capture_routing=True, invariant=True)
    torch.testing.assert_close(invariant, normal, rtol=0, atol=1e-5)
    assert torch.equal(inv_routed, routed)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 70), start=st.integers(0, 30))
def test_invariant_linear_gives_each_row_the_same_bits_whatever_its_neighbours(n: int, start: int):
    torch.manual_seed(1)
    x, w = torch.randn(100, 40), torch.randn(24, 40)
    full = invariant_linear(x, w)
    assert torch.equal(invariant_linear(x[start : start + n], w), full[start : start + n])
    torch.testing.assert_close(full, x @ w.T, rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(t=st.integers(0, 39), extra=st.integers(0, 40))
def test_invariant_attention_ignores_keys_past_a_query_and_their_count(t: int, extra: int):
    torch.manual_seed(2)
    q, k, v = torch.randn(1, 2, 40, 8), torch.randn(1, 2, 80, 8), torch.randn(1, 2, 80, 8)
    causal = torch.arange(80)[None, :] <= torch.arange(40)[:, None]  # [40, 80]
    whole = invariant_attention(q, k, v, causal[None], 0.5)[:, :, t]
    keys = t + 1 + extra
    one = invariant_attention(q[:, :, t : t + 1], k[:, :, :keys], v[:, :, :keys], causal[None, t : t + 1, :keys], 0.5)
    assert torch.equal(one[:, :, 0], whole)
    probs = torch.softmax(torch.einsum("hd,hld->hl", q[0, :, t], k[0, :, : t + 1]) * 0.5, dim=-1)  # [H, t + 1]
    reference = torch.einsum("hl,hld->hd", probs, v[0, :, : t + 1])
    torch.testing.assert_close(whole[0], reference, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 400), seed=st.integers(0, 1000), family=st.sampled_from(["qwen3_moe", "gpt_oss"]))
def test_invariant_experts_give_the_same_bits_gathered_or_per_expert(n: int, seed: int, family: str):
    """Both ways of batching the experts give the same bits, and the experts' math (GPT-OSS: biases and the clamped
    activation)."""
    gen = torch.Generator().manual_seed(seed)
    config = MoEConfig.preset("tiny", vocab_size=8, model_type=family, hidden_size=32, moe_intermediate_size=12)
    experts = Experts(config)
    with torch.no_grad():
        for p in experts.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    x, weights = torch.randn(n, 32, generator=gen), torch.rand(n, 2, generator=gen)
    ids = torch.stack([torch.randperm(config.num_experts, generator=gen)[:2] for _ in range(n)])
    with torch.no_grad():
        gathered = invariant_experts(experts, x, ids, weights, gathered=True)
        per_expert = invariant_experts(experts, x, ids, weights, gathered=False)
        reference = experts(x, ids, weights)
    assert torch.equal(gathered, per_expert)
    torch.testing.assert_close(gathered, reference, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3", "gpt_oss"])
def test_a_shared_prompt_computed_once_gives_every_row_bitwise_its_invariant_log_probs(family: str):
    """True on-policy training computes a GRPO group's prompt once (`shared_prefix`), as the normal path does: the
    rows' log-probs (with their replayed routing) are bit for bit those of every row computed in full, whatever the
    family's attention (MLA; sinks and a sliding window); the gradients equal theirs up to the order in which the
    rows' contributions to the prompt are summed."""
    torch.manual_seed(0)
    model = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=48, model_type=family))
    prompt = IDS[:9]
    rows = [prompt + IDS[9:15], prompt + IDS[12:22], prompt + IDS[15:17], IDS[2:13]]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    prompt_lengths = torch.tensor([9, 9, 9, 5])
    with torch.no_grad():
        _, routed = model.token_log_probs(ids, mask, capture_routing=True, invariant=True)
    replay = RouterReplay(routed, mask.bool())
    assert prefix_owners(ids, prompt_lengths, replay).tolist() == [0, 0, 0, 3]  # three rows read one prompt
    got = []
    for shared in (None, prompt_lengths):
        model.zero_grad()
        scores = model.token_log_probs_at(
            ids, mask, None, temperature=0.7, replay=replay, logits_from=prompt_lengths - 1,
            shared_prefix=shared, invariant=True,
        )  # fmt: skip
        scores.log_probs.sum().backward()
        got.append((scores.log_probs.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (full, full_grads), (once, once_grads) = got
    assert full.abs().sum() > 0 and torch.equal(once, full)
    for name, grad in full_grads.items():
        torch.testing.assert_close(once_grads[name], grad, rtol=1e-4, atol=1e-4, msg=name)
