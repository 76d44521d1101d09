"""The routing rows' layout of a Hugging Face MoE checkpoint, read from its config.json without torch: which decoder
layers route for every supported family (dense layers have no column), agreeing with moe_models' own rule."""

from __future__ import annotations

import pytest
from routing_state import RoutingSpec, RoutingTrace, moe_layers, routing_spec


@pytest.mark.parametrize(
    ("config", "layers"),
    [
        ({"model_type": "qwen3_moe", "num_hidden_layers": 4, "mlp_only_layers": [0]}, (1, 2, 3)),
        ({"model_type": "qwen2_moe", "num_hidden_layers": 6, "decoder_sparse_step": 2}, (1, 3, 5)),
        ({"model_type": "deepseek_v3", "num_hidden_layers": 4, "first_k_dense_replace": 1}, (1, 2, 3)),
        ({"model_type": "mixtral", "num_hidden_layers": 3}, (0, 1, 2)),
        ({"model_type": "gpt_oss", "num_hidden_layers": 2}, (0, 1)),
    ],
)
def test_each_family_says_which_layers_route(config: dict, layers: tuple[int, ...]) -> None:
    assert moe_layers(config) == layers


def test_the_spec_names_each_columns_decoder_layer_and_survives_the_wire() -> None:
    config = {"model_type": "deepseek_v3", "num_hidden_layers": 3, "first_k_dense_replace": 1}
    spec = routing_spec({**config, "n_routed_experts": 8, "num_experts_per_tok": 2})
    assert spec == RoutingSpec(2, 2, 8, layers=(1, 2))
    trace = RoutingTrace(spec)
    trace.extend([[[0, 1], [2, 3]]], version=0, start=0)
    assert RoutingTrace.from_bytes(trace.to_bytes()).spec.layers == (1, 2)
    assert RoutingTrace.from_json_dict(trace.to_json_dict()).spec.layers == (1, 2)
    assert routing_spec({"model_type": "mixtral", "num_hidden_layers": 2}) is None  # no experts: dense


def test_an_unknown_family_and_bad_layers_are_refused() -> None:
    with pytest.raises(ValueError, match="model_type: got 'llama'"):
        moe_layers({"model_type": "llama", "num_hidden_layers": 2})
    with pytest.raises(ValueError, match="ascending decoder-layer indices"):
        RoutingSpec(2, 2, 8, layers=(2, 1))


def test_moe_models_rule_agrees_for_every_family_preset() -> None:
    moe_models = pytest.importorskip("moe_models")
    for family in moe_models.FAMILY_NAMES:
        config = moe_models.MoEConfig.preset("tiny", vocab_size=16, model_type=family)
        spec = routing_spec(config.to_hf_dict())
        assert spec is not None and spec.layers == config.moe_layer_ids, family
        assert (spec.num_experts, spec.top_k) == (config.num_experts, config.num_experts_per_tok)
