"""MoEConfig: presets' sizes, validation messages, config.json round trip, MoE layer bookkeeping."""

from __future__ import annotations

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM
from moe_models.config import FULL_VOCAB_PRESETS


@pytest.mark.parametrize("vocab_size", [32, 300])
def test_tiny_preset_has_1_to_2_million_params_and_head_dim_at_least_32(vocab_size: int) -> None:
    config = MoEConfig.preset("tiny", vocab_size=vocab_size)
    params = MoEForCausalLM(config).num_parameters()
    assert 1_000_000 <= params <= 2_000_000
    assert config.head_dim >= 32
    assert config.num_experts == 8 and config.num_experts_per_tok == 2


@pytest.mark.parametrize(("preset", "total_m"), [("small", (40, 45)), ("base", (300, 330))])
def test_the_production_presets_have_their_sizes_at_a_151936_row_vocabulary(
    preset: str, total_m: tuple[int, int]
) -> None:
    config = MoEConfig.preset(preset, vocab_size=151_936)
    with torch.device("meta"):  # sizes only: no memory
        params = MoEForCausalLM(config).num_parameters()
    assert total_m[0] * 1e6 <= params <= total_m[1] * 1e6
    assert config.head_dim >= 32 and preset in FULL_VOCAB_PRESETS


def test_unknown_preset_is_rejected() -> None:
    with pytest.raises(ValueError, match="huge"):
        MoEConfig.preset("huge", vocab_size=10)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"num_key_value_heads": 3}, "multiple"),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"mlp_only_layers": (7,)}, "mlp_only_layers"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"eos_token_id": 50}, "eos_token_id"),
        ({"head_dim": 33}, "even"),
    ],
)
def test_invalid_config_raises_with_got_and_expected(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MoEConfig.preset("tiny", vocab_size=50, **changes)


def test_moe_layer_ids_follow_mlp_only_layers_and_sparse_step() -> None:
    config = MoEConfig.preset("tiny", vocab_size=20, num_hidden_layers=6, decoder_sparse_step=2, mlp_only_layers=(3,))
    assert config.moe_layer_ids == (1, 5)
    assert config.num_moe_layers == 2
    model = MoEForCausalLM(config)
    assert [layer.is_moe for layer in model.model.layers] == [False, True, False, False, False, True]


def test_hf_dict_round_trip_and_identity_fields() -> None:
    config = MoEConfig.preset(
        "tiny", vocab_size=40, mlp_only_layers=(0, 2), bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    data = config.to_hf_dict()
    assert data["model_type"] == "qwen3_moe"
    assert data["architectures"] == ["Qwen3MoeForCausalLM"]
    assert data["mlp_only_layers"] == [0, 2]
    assert MoEConfig.from_hf_dict(data) == config


def test_hf_dict_with_unsupported_math_is_rejected() -> None:
    data = MoEConfig.preset("tiny", vocab_size=40).to_hf_dict()
    with pytest.raises(ValueError, match="attention_bias"):
        MoEConfig.from_hf_dict({**data, "attention_bias": True})
    with pytest.raises(ValueError, match="rope type"):
        MoEConfig.from_hf_dict({**data, "rope_parameters": {"rope_type": "linear", "factor": 4.0}})
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        MoEConfig.from_hf_dict({**data, "rope_parameters": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(ValueError, match="model_type"):
        MoEConfig.from_hf_dict({**data, "model_type": "llama"})


def test_hf_dict_reads_num_local_experts_alias() -> None:
    data = MoEConfig.preset("tiny", vocab_size=40, num_experts=4).to_hf_dict()
    data["num_local_experts"] = data.pop("num_experts")
    assert MoEConfig.from_hf_dict(data).num_experts == 4
