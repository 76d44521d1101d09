"""forward_trace records every layer's ops in forward order, as float32 copies, without changing the forward."""

from __future__ import annotations

import torch
from moe_models import MoEConfig, MoEForCausalLM
from moe_models.forward_trace import trace_forward


def _model() -> MoEForCausalLM:
    torch.manual_seed(0)
    return MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=64)).eval()


def test_the_trace_lists_every_op_of_every_layer_in_forward_order():
    model = _model()
    ids = torch.randint(0, 64, (1, 9))
    points = trace_forward(model, ids)
    names = [(p.layer, p.op) for p in points]
    expected = [(-1, "embed")]
    for i in range(model.config.num_hidden_layers):
        moe = ["router_logits", "topk"] if model.config.is_moe_layer(i) else []
        expected += [(i, "attn_out"), *[(i, op) for op in moe], (i, "mlp_out"), (i, "hidden")]
    expected.append((model.config.num_hidden_layers, "logits"))
    assert names == expected
    with torch.no_grad():  # the same expert path as the trace's (no-grad CPU forwards use grouped_mm)
        logits = model(ids).logits.float()  # [1, 9, V]; the trace holds [tokens, V]
        torch.testing.assert_close(points[-1].value, logits.reshape(9, -1), rtol=0, atol=0)
    moe_layer = next(i for i in range(model.config.num_hidden_layers) if model.config.is_moe_layer(i))
    topk = next(p.value for p in points if p.layer == moe_layer and p.op == "topk")
    assert topk.shape == (9, model.config.num_experts_per_tok) and torch.equal(topk, topk.sort(dim=-1).values)


def test_a_bf16_model_records_float32_copies_and_a_layer_subset_keeps_embed_and_logits():
    model = _model().to(torch.bfloat16)
    points = trace_forward(model, torch.randint(0, 64, (1, 5)), layers=[1])
    assert {p.layer for p in points} == {-1, 1, model.config.num_hidden_layers}
    assert all(p.value.dtype in (torch.float32, torch.int64) for p in points)
    assert not any(m._forward_hooks for m in model.modules())  # hooks removed
