"""Router replay: forced experts, native routing where masked off, gradients still reach the router."""

from __future__ import annotations

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM, RouterReplay

CONFIG = MoEConfig.preset("tiny", vocab_size=47, num_hidden_layers=3, mlp_only_layers=(1,))


def _setup(seed: int = 0) -> tuple[MoEForCausalLM, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = MoEForCausalLM(CONFIG)
    ids = torch.randint(0, 47, (2, 10))
    with torch.no_grad():
        routed = model(ids, capture_routing=True).routed_experts
    assert routed is not None
    return model, ids, routed


def _other_experts(routed: torch.Tensor) -> torch.Tensor:
    """A different, valid top-k for every row: each id shifted by one (mod E) keeps the ids distinct."""
    return (routed + 1) % CONFIG.num_experts


def test_replaying_captured_routing_gives_identical_logits() -> None:
    model, ids, routed = _setup()
    with torch.no_grad():
        native = model(ids).logits
        replayed = model(ids, replay=RouterReplay(routed, torch.ones(2, 10, dtype=torch.bool))).logits
    assert torch.equal(native, replayed)


def test_replaying_different_experts_changes_outputs_and_is_reported() -> None:
    model, ids, routed = _setup()
    forced = _other_experts(routed)
    with torch.no_grad():
        native = model(ids).logits
        out = model(ids, replay=RouterReplay(forced, torch.ones(2, 10, dtype=torch.bool)), capture_routing=True)
    assert torch.equal(out.routed_experts, forced)
    assert (out.logits - native).abs().max().item() > 1e-3


def test_masked_off_positions_route_natively() -> None:
    model, ids, routed = _setup()
    forced = _other_experts(routed)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[:, 5:] = True  # replay only the tail: the causal prefix must be untouched
    with torch.no_grad():
        native = model(ids).logits
        out = model(ids, replay=RouterReplay(forced, mask), capture_routing=True)
    assert torch.equal(out.routed_experts[:, :5], routed[:, :5])
    assert torch.equal(out.routed_experts[:, 5:], forced[:, 5:])
    # matmul blocking may depend on how many rows an expert gets, so the untouched prefix agrees to rounding
    assert (out.logits[:, :5] - native[:, :5]).abs().max().item() <= 1e-6
    assert not torch.allclose(out.logits[:, 5:], native[:, 5:])


def test_gradients_reach_router_weights_under_full_replay() -> None:
    model, ids, routed = _setup()
    replay = RouterReplay(_other_experts(routed), torch.ones(2, 10, dtype=torch.bool))
    log_probs, _ = model.token_log_probs(ids, None, replay=replay)
    log_probs.sum().backward()
    for layer_id in CONFIG.moe_layer_ids:
        grad = model.model.layers[layer_id].mlp.gate.weight.grad
        assert grad is not None
        assert grad.abs().sum().item() > 0


@pytest.mark.parametrize(
    ("ids_shape", "fill", "match"),
    [
        ((2, 10, 1, 2), 0, "shape"),
        ((2, 10, 2, 2), 99, r"\[0, 8\)"),
        ((2, 10, 2, 2), 3, "repeated expert"),
    ],
)
def test_malformed_replay_raises(ids_shape: tuple[int, ...], fill: int, match: str) -> None:
    model, ids, _ = _setup()
    bad = torch.full(ids_shape, fill, dtype=torch.int64)
    with pytest.raises(ValueError, match=match):
        model(ids, replay=RouterReplay(bad, torch.ones(2, 10, dtype=torch.bool)))
