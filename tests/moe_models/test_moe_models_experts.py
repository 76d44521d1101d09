"""Batched experts equal a per-token brute force, on the grouped (inference) and padded (autograd) paths; the
looped and grouped autograd kernels equal the padded one."""

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


def test_looped_and_grouped_kernels_match_padded_in_output_and_every_gradient() -> None:
    experts, h, ids, weights = _case(2)
    results = []
    for kernel in ("padded", "looped", "grouped"):
        experts.zero_grad()
        experts.autograd_kernel = kernel
        x = h.clone().requires_grad_(True)
        w = weights.clone().requires_grad_(True)
        out = experts(x, ids, w)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append([out, x.grad, w.grad, experts.gate_up_proj.grad.clone(), experts.down_proj.grad.clone()])
    for other in results[1:]:
        for padded, value in zip(results[0], other, strict=True):
            torch.testing.assert_close(value, padded, rtol=1e-5, atol=1e-6)
    assert all(r[3][5].abs().max() == 0 for r in results)  # expert 5 has no token: no gradient on any path


def _indexed_reference(experts: Experts, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The looped kernel written with per-expert indexing (its earlier form)."""
    out, start = [], 0
    for e, n in enumerate(counts.tolist()):
        if n:
            gate, up = (x[start : start + n] @ experts.gate_up_proj[e].T).chunk(2, dim=-1)
            out.append((F.silu(gate) * up) @ experts.down_proj[e].T)
            start += n
    return torch.cat(out)


def test_looped_kernel_equals_per_expert_indexing_bit_for_bit_with_gradients() -> None:
    experts, h, ids, _ = _case(3)
    counts = torch.bincount(ids.reshape(-1), minlength=experts.num_experts)
    x0 = h.index_select(0, torch.argsort(ids.reshape(-1), stable=True) // ids.shape[1])
    results = []
    for fn in (experts._looped, lambda x, c: _indexed_reference(experts, x, c)):
        experts.zero_grad()
        x = x0.clone().requires_grad_(True)
        out = fn(x, counts)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append([out, x.grad, experts.gate_up_proj.grad.clone(), experts.down_proj.grad.clone()])
    for looped, indexed in zip(*results, strict=True):
        assert torch.equal(looped, indexed)


def test_looped_kernel_backward_zero_fills_less_than_one_copy_of_the_weights() -> None:
    from math import prod

    from torch.profiler import profile

    experts, h, ids, weights = _case(4)
    experts.autograd_kernel = "looped"
    out = experts(h.clone().requires_grad_(True), ids, weights)
    with profile(record_shapes=True) as prof:
        out.sum().backward()
    filled = sum(prod(e.input_shapes[0]) for e in prof.events() if e.name == "aten::fill_")
    # indexing expert by expert zero-filled a whole copy of each weight (and of the input) per used expert (5 here)
    assert 0 < filled < experts.gate_up_proj.numel() + experts.down_proj.numel()


def test_set_experts_kernel_reaches_every_layer_and_rejects_unknown_kernels() -> None:
    from moe_models import set_experts_kernel

    model = MoEForCausalLM(CONFIG)
    set_experts_kernel(model, "looped")
    kernels = {m.autograd_kernel for m in model.modules() if isinstance(m, Experts)}
    assert kernels == {"looped"}
    with pytest.raises(ValueError, match=r"expected one of \('grouped', 'padded', 'looped'\), got 'fused'"):
        set_experts_kernel(model, "fused")
