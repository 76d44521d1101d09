"""Batched experts equal a per-token brute force, on both the grouped (inference) and padded (autograd) paths."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from moe_models import MoEConfig, MoEForCausalLM
from moe_models.moe import Experts

CONFIG = MoEConfig.preset("tiny", vocab_size=16, num_experts=6, num_experts_per_tok=3)


def _brute_force(experts: Experts, h: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    inter = experts.down_proj.shape[-1]
    out = torch.zeros_like(h)
    for n in range(h.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[n, k])
            gate_up = experts.gate_up_proj[e] @ h[n]
            hidden = F.silu(gate_up[:inter]) * gate_up[inter:]
            out[n] += weights[n, k] * (experts.down_proj[e] @ hidden)
    return out


def _case(seed: int) -> tuple[Experts, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    experts = MoEForCausalLM(CONFIG).model.layers[0].mlp.experts
    h = torch.randn(9, CONFIG.hidden_size)
    # expert 5 gets no token: empty groups must be handled by both paths
    ids = torch.stack([torch.randperm(5)[:3] for _ in range(9)])
    weights = torch.rand(9, 3)
    return experts, h, ids, weights


@pytest.mark.parametrize("grad_enabled", [False, True])
def test_experts_match_brute_force_on_both_paths(grad_enabled: bool) -> None:
    experts, h, ids, weights = _case(0)
    with torch.no_grad():
        expected = _brute_force(experts, h, ids, weights)
    with torch.set_grad_enabled(grad_enabled):
        assert experts._grouped_mm_applies(h) is (not grad_enabled)
        got = experts(h, ids, weights)
    assert (got - expected).abs().max().item() <= 1e-5


def test_padded_path_passes_gradients_to_every_used_expert() -> None:
    experts, h, ids, weights = _case(1)
    experts(h, ids, weights).sum().backward()
    grad = experts.gate_up_proj.grad
    assert grad is not None
    used = grad.abs().flatten(1).sum(-1) > 0
    assert used.tolist() == [True, True, True, True, True, False]
