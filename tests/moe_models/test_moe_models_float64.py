"""A float64 model computes in float64 throughout: the norm statistics, the router softmax and the rotary tables,
which run in float32 for float32 and lower-precision inputs, are not narrowed to float32 for float64 input (the
warm-up trains in float64 so that every CPU reaches the same base; one float32 op would bring float32 rounding
back into its gradients)."""

from __future__ import annotations

import torch
from moe_models import MoEConfig
from moe_models.norm import rms_norm
from moe_models.rope import RotaryEmbedding, rotary_tables
from moe_models.router import TopKRouter

F64_CLOSE = {"rtol": 1e-13, "atol": 1e-13}  # float32 statistics would be off by ~1e-7


def test_rms_norm_of_float64_input_keeps_float64_statistics() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 64, dtype=torch.float64) * 3.0
    w = torch.rand(64, dtype=torch.float64) + 0.5
    want = w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    got = rms_norm(x, w, 1e-6)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, **F64_CLOSE)
    narrowed = w * torch.nn.functional.rms_norm(x.float(), (64,), None, 1e-6).double()
    assert (narrowed - want).abs().max() > 1e-9  # the tolerance above tells the two apart
    x32, w32 = x.float(), w.float()  # float32 input: statistics stay float32, as before
    torch.testing.assert_close(rms_norm(x32, w32, 1e-6), torch.nn.functional.rms_norm(x32, (64,), w32, 1e-6))


def test_router_of_float64_input_takes_its_weights_from_a_float64_softmax() -> None:
    cfg = MoEConfig.preset("tiny", vocab_size=32)
    router = TopKRouter(cfg).double()
    torch.manual_seed(1)
    torch.nn.init.normal_(router.weight, std=0.5)
    h = torch.randn(8, cfg.hidden_size, dtype=torch.float64)
    weights, ids = router(h)
    probs = torch.softmax(h @ router.weight.T, dim=-1)  # float64
    want = probs.gather(1, ids)
    if cfg.norm_topk_prob:
        want = want / want.sum(-1, keepdim=True)
    assert weights.dtype == torch.float64
    torch.testing.assert_close(weights, want, **F64_CLOSE)


def test_rotary_tables_in_float64_are_computed_in_float64() -> None:
    config = MoEConfig.preset("tiny", vocab_size=10, head_dim=16, rope_theta=1_000_000.0)
    rope = RotaryEmbedding(config).double()
    positions = torch.arange(0, 1024)
    cos, signed_sin = rope(positions, torch.float64)
    angles = positions[:, None].double() * rope.inv_freq.double()
    torch.testing.assert_close(cos, torch.cat((angles, angles), -1).cos(), **F64_CLOSE)
    torch.testing.assert_close(signed_sin[:, 8:], angles.sin(), **F64_CLOSE)
    cos32, _ = rotary_tables(positions, rope.inv_freq.float(), torch.float32)  # float32 angles: ~1e-4 off at 1023
    assert (cos32.double() - cos).abs().max() > 1e-6
