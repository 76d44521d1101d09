"""transformers' in-memory DeepSeek-V3 layout <-> Megatron-Core's multi-latent-attention GPTModel layout (plain
torch, no Megatron needed): exact round trips at expert parallel 1, 2 and 4, with and without a query latent and
RoPE interleaving; the RoPE rows, dense layers, shared experts and router bias where Megatron expects them."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from trainers.backend.megatron.deepseek_convert import MlaShape, hf_to_megatron, megatron_to_hf

transformers = pytest.importorskip("transformers")

BASE: dict[str, Any] = {
    "vocab_size": 24,
    "hidden_size": 16,
    "intermediate_size": 24,
    "moe_intermediate_size": 8,
    "num_hidden_layers": 3,
    "first_k_dense_replace": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "kv_lora_rank": 8,
    "qk_nope_head_dim": 4,
    "qk_rope_head_dim": 4,
    "v_head_dim": 6,
    "n_routed_experts": 8,
    "n_shared_experts": 2,
    "num_experts_per_tok": 2,
    "n_group": 2,
    "topk_group": 1,
}
LATENT = {**BASE, "q_lora_rank": 8, "rope_interleave": True}
PLAIN = {**BASE, "q_lora_rank": None, "rope_interleave": False}


def _hf(cfg: dict[str, Any]) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**cfg))
    with torch.no_grad():
        for layer in model.model.layers[cfg["first_k_dense_replace"] :]:
            layer.mlp.gate.e_score_correction_bias.normal_()
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("cfg", [LATENT, PLAIN], ids=["latent-interleaved", "plain-not-interleaved"])
@pytest.mark.parametrize("ep", [1, 2, 4])
def test_deepseek_hf_to_megatron_and_back_is_exact_at_every_expert_parallel_size(cfg: dict, ep: int) -> None:
    hf = _hf(cfg)
    ranks = [hf_to_megatron(hf, MlaShape.from_hf_config(cfg, ep_size=ep, ep_rank=r)) for r in range(ep)]
    back = megatron_to_hf(ranks, MlaShape.from_hf_config(cfg, ep_size=ep))
    assert back.keys() == hf.keys()
    for name, tensor in hf.items():
        assert torch.equal(back[name], tensor), name


def test_without_buffers_only_parameters_convert() -> None:
    model = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**LATENT))
    model_params = {k for k, _ in model.named_parameters()}
    hf = _hf(LATENT)
    shape = MlaShape.from_hf_config(LATENT)
    mg = hf_to_megatron(hf, shape, buffers=False)
    assert not [k for k in mg if k.endswith("expert_bias")]
    assert megatron_to_hf([mg], shape, buffers=False).keys() == model_params


def test_rope_rows_are_interleaved_for_megatron_only_where_transformers_does_not_interleave() -> None:
    r, nope, heads = BASE["qk_rope_head_dim"], BASE["qk_nope_head_dim"], BASE["num_attention_heads"]
    for cfg in (LATENT, PLAIN):
        hf = _hf(cfg)
        mg = hf_to_megatron(hf, MlaShape.from_hf_config(cfg))
        q_name = "q_b_proj" if cfg["q_lora_rank"] else "q_proj"
        mg_q_name = "linear_q_up_proj" if cfg["q_lora_rank"] else "linear_q_proj"
        q = hf[f"model.layers.0.self_attn.{q_name}.weight"].reshape(heads, nope + r, -1)
        mg_q = mg[f"decoder.layers.0.self_attention.{mg_q_name}.weight"].reshape(heads, nope + r, -1)
        kv = hf["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"]
        mg_kv = mg["decoder.layers.0.self_attention.linear_kv_down_proj.weight"]
        order = [0, 2, 1, 3] if not cfg["rope_interleave"] else [0, 1, 2, 3]  # Megatron row 2j = HF j, 2j+1 = r/2+j
        assert torch.equal(mg_q[:, :nope], q[:, :nope]) and torch.equal(mg_q[:, nope:], q[:, nope:][:, order])
        latent = BASE["kv_lora_rank"]
        assert torch.equal(mg_kv[:latent], kv[:latent]) and torch.equal(mg_kv[latent:], kv[latent:][order])


def test_dense_layers_get_a_fused_mlp_and_moe_layers_a_router_bias_shared_experts_and_their_experts() -> None:
    hf = _hf(LATENT)
    shape = MlaShape.from_hf_config(LATENT, ep_size=2, ep_rank=1)
    mg = hf_to_megatron(hf, shape)
    dense, moe = "decoder.layers.0.mlp.", "decoder.layers.1.mlp."
    gate, up = hf["model.layers.0.mlp.gate_proj.weight"], hf["model.layers.0.mlp.up_proj.weight"]
    assert torch.equal(mg[dense + "linear_fc1.weight"], torch.cat([gate, up]))
    assert not [k for k in mg if k.startswith(dense) and ("router" in k or "experts" in k)]
    assert torch.equal(mg[moe + "router.expert_bias"], hf["model.layers.1.mlp.gate.e_score_correction_bias"])
    shared = "model.layers.1.mlp.shared_experts."
    want = torch.cat([hf[shared + "gate_proj.weight"], hf[shared + "up_proj.weight"]])
    assert torch.equal(mg[moe + "shared_experts.linear_fc1.weight"], want)
    assert len([k for k in mg if k.startswith(moe + "experts.local_experts.")]) == 2 * BASE["n_routed_experts"] // 2
    first = BASE["n_routed_experts"] // 2  # rank 1's first expert
    gate_up = hf["model.layers.1.mlp.experts.gate_up_proj"]
    assert torch.equal(mg[moe + "experts.local_experts.0.linear_fc1.weight"], gate_up[first])
    assert shape.moe_layers == [1, 2]


def test_bad_deepseek_shapes_are_refused_with_what_was_expected() -> None:
    with pytest.raises(ValueError, match="ep_size dividing 8"):
        MlaShape.from_hf_config(LATENT, ep_size=3)
    with pytest.raises(ValueError, match="qk_rope_head_dim: expected an even number, got 3"):
        MlaShape.from_hf_config({**LATENT, "qk_rope_head_dim": 3})
    with pytest.raises(ValueError, match=r"first_k_dense_replace: expected 0..3 \(num_hidden_layers\), got 4"):
        MlaShape.from_hf_config({**LATENT, "first_k_dense_replace": 4})
    with pytest.raises(ValueError, match="expected 2 rank state dicts, got 1"):
        two = MlaShape.from_hf_config(LATENT, ep_size=2)
        megatron_to_hf([hf_to_megatron(_hf(LATENT), two)], two)
