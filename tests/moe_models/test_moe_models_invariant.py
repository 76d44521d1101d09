"""The invariant forward: a position's result does not depend on what follows it or on autograd, and it is the
model's own function (equal to the batched forward up to float rounding)."""

from __future__ import annotations

import itertools

import torch
from moe_models import MoEConfig, MoEForCausalLM
from moe_models.invariant import InvariantState, invariant_log_probs, invariant_step


def _model() -> MoEForCausalLM:
    torch.manual_seed(0)
    return MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=48)).eval()


IDS = [1, 7, 3, 44, 9, 9, 2, 30, 5, 11, 6]


def test_a_prefix_gives_bitwise_the_log_probs_and_routing_of_the_whole_sequence_there():
    model = _model()
    with torch.no_grad():
        whole, routed = invariant_log_probs(model, IDS)
        part, routed_part = invariant_log_probs(model, IDS[:6])
    assert torch.equal(whole[:5], part)
    assert torch.equal(routed[:5], routed_part)


def test_autograd_does_not_change_a_bit_and_gradients_flow():
    model = _model()
    with torch.no_grad():
        plain, _ = invariant_log_probs(model, IDS, temperature=0.7, start=4)
    graded, _ = invariant_log_probs(model, IDS, temperature=0.7, start=4)
    assert torch.equal(plain, graded.detach())
    graded.sum().backward()
    assert model.lm_head.weight.grad is not None and model.model.layers[1].mlp.experts.gate_up_proj.grad.abs().sum() > 0


def test_the_invariant_forward_is_the_model_up_to_rounding():
    model = _model()
    ids = torch.tensor([IDS])
    with torch.no_grad():
        batched, routed = model.token_log_probs(ids, None, capture_routing=True)
        invariant, inv_routed = invariant_log_probs(model, IDS)
    torch.testing.assert_close(invariant, batched[0], rtol=0, atol=1e-5)
    assert torch.equal(inv_routed, routed[0, :-1])


def test_a_step_by_step_decode_equals_the_sequence_recompute():
    model = _model()
    state = InvariantState()
    with torch.no_grad():
        steps = []
        for t, n in itertools.pairwise(IDS):
            logits, _ = invariant_step(model, t, state)
            steps.append(logits[None].log_softmax(-1)[0, n])
        whole, _ = invariant_log_probs(model, IDS)
    assert torch.equal(torch.stack(steps), whole)
    assert state.length == len(IDS) - 1
