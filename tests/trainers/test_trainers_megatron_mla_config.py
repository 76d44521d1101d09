"""DeepSeek-V3's `config.json` as Megatron-Core's MLATransformerConfig: the published DeepSeek-V3 config maps to
its routing, RoPE and layer pattern, and a config where transformers and Megatron would compute different things
is refused with what was expected. Needs the `megatron` group: `bash scripts/test_megatron.sh`."""

from __future__ import annotations

import math
from importlib.util import find_spec
from typing import Any

import pytest

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(
        find_spec("megatron") is None, reason="no Megatron-Core here: run bash scripts/test_megatron.sh"
    ),
]

DEEPSEEK_V3: dict[str, Any] = {  # the fields of deepseek-ai/DeepSeek-V3's config.json this build reads
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 8,
    "topk_group": 4,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "attention_bias": False,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


def test_deepseek_v3s_published_config_maps_to_its_routing_rope_and_dense_first_layers() -> None:
    from trainers.backend.megatron.deepseek_gpt import mla_transformer_config

    tc = mla_transformer_config(DEEPSEEK_V3)
    assert tc.moe_layer_freq == [0, 0, 0] + [1] * 58
    assert (tc.moe_router_num_groups, tc.moe_router_group_topk, tc.moe_router_topk) == (8, 4, 8)
    assert tc.moe_router_score_function == "sigmoid" and tc.moe_router_enable_expert_bias
    assert tc.moe_router_topk_scaling_factor == 2.5 and tc.moe_shared_expert_intermediate_size == 2048
    assert (tc.q_lora_rank, tc.kv_lora_rank, tc.qk_head_dim, tc.qk_pos_emb_head_dim, tc.v_head_dim) == (
        1536,
        512,
        128,
        64,
        128,
    )
    assert (tc.rope_type, tc.rotary_scaling_factor, tc.original_max_position_embeddings) == ("yarn", 40.0, 4096)
    assert (tc.mscale, tc.mscale_all_dim) == (1.0, 1.0)  # softmax scale 192^-0.5 * (0.1 ln 40 + 1)^2, as transformers


def test_group_limited_top_k_must_score_groups_by_their_top_two_as_transformers_does() -> None:
    from trainers.backend.megatron.deepseek_gpt import mla_transformer_config, routing_settings

    with pytest.raises(ValueError, match=r"num_experts_per_tok: expected 2 \* topk_group = 8"):
        mla_transformer_config({**DEEPSEEK_V3, "num_experts_per_tok": 6})
    every_group = routing_settings({**DEEPSEEK_V3, "num_experts_per_tok": 6, "topk_group": 8})
    assert every_group["moe_router_num_groups"] is None  # all groups kept: no group limit, any top-k


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"norm_topk_prob": False}, "norm_topk_prob / num_experts_per_tok: expected true / >= 2"),
        ({"n_group": 3}, "n_group / topk_group: expected n_group dividing 256"),
        ({"n_group": None}, "n_group / topk_group: expected n_group dividing 256"),
        ({"rms_norm_eps": 1e-5}, "rms_norm_eps: expected 1e-06"),
        ({"attention_bias": True}, "attention_bias: expected False"),
        ({"tie_word_embeddings": True}, "tie_word_embeddings: expected False"),
        ({"num_key_value_heads": 1}, "num_key_value_heads: expected 128"),
        ({"n_shared_experts": 0}, "n_shared_experts: expected >= 1"),
        ({"first_k_dense_replace": 61}, r"first_k_dense_replace: expected < num_hidden_layers \(61\)"),
        ({"rope_scaling": {"type": "longrope", "factor": 4.0}}, "rope_type: expected 'default' or 'yarn'"),
        ({"rope_scaling": {**DEEPSEEK_V3["rope_scaling"], "attention_factor": 1.2}}, "attention_factor / truncate"),
        ({"rope_scaling": {**DEEPSEEK_V3["rope_scaling"], "mscale": 0}}, "yarn mscale: expected set wherever"),
    ],
)
def test_configs_that_transformers_and_megatron_would_compute_differently_are_refused(change: dict, message: str):
    from trainers.backend.megatron.deepseek_gpt import mla_transformer_config

    with pytest.raises(ValueError, match=message):
        mla_transformer_config({**DEEPSEEK_V3, **change})


def test_yarn_without_mscale_all_dim_gives_transformers_attention_factor() -> None:
    from megatron.core.models.common.embeddings.yarn_rotary_pos_embedding import _yarn_get_concentration_factor
    from trainers.backend.megatron.deepseek_gpt import rope_settings

    rope = rope_settings({**DEEPSEEK_V3, "rope_scaling": {**DEEPSEEK_V3["rope_scaling"], "mscale_all_dim": None}})
    got = _yarn_get_concentration_factor(rope["rotary_scaling_factor"], rope["mscale"], rope["mscale_all_dim"])
    assert got == pytest.approx(0.1 * math.log(40) + 1.0)  # transformers' get_mscale(factor), mscale 1
    assert rope["mscale_all_dim"] == 0.0  # and no extra softmax scale
