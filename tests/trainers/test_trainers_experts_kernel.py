"""`backend.experts_kernel looped` reaches the trained model and gives the padded kernel's step to float rounding."""

from __future__ import annotations

import torch
from moe_models.moe import Experts
from trainers import collate
from trainers.backend import OptimConfig
from trainers.backend.config import TorchBackendConfig
from trainers_fixtures import PAD, algorithm, grads, rollouts, step, tiny_model


def test_looped_experts_kernel_gives_the_padded_step_to_float_rounding() -> None:
    batch = collate(rollouts(tiny_model(1), 4, 3), PAD)  # another model's rollouts: replay moves the routing
    results = {}
    for kernel in ("padded", "looped"):
        model = tiny_model(0)
        b = TorchBackendConfig(device="cpu", experts_kernel=kernel).build(model, OptimConfig(lr=1e-2), temperature=1.0)
        assert {m.autograd_kernel for m in model.modules() if isinstance(m, Experts)} == {kernel}
        result = step(b, batch, algorithm())
        results[kernel] = (result.metrics, grads(model), {k: v.clone() for k, v in model.state_dict().items()})
    (m_pad, g_pad, w_pad), (m_loop, g_loop, _) = results["padded"], results["looped"]
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert abs(m_loop[key] - m_pad[key]) <= 1e-5 * max(1.0, abs(m_pad[key])), (key, m_loop[key], m_pad[key])
    assert g_pad.keys() == g_loop.keys()
    for name in g_pad:
        torch.testing.assert_close(g_loop[name], g_pad[name], rtol=1e-4, atol=1e-6, msg=name)
    # weights after AdamW are not compared: its first step moves each weight by ~lr * sign(grad), so a gradient
    # near 0 whose sign flips at rounding moves that weight the other way
    moved = max((w_pad[k] - tiny_model(0).state_dict()[k]).abs().max().item() for k in w_pad)
    assert moved > 1e-4  # the step changed the weights, so the comparison is not between two no-ops
