"""What the Megatron backend trains, decided from a checkpoint's config.json without torch or Megatron: every size
preset of both families it builds is accepted, each config of ours that Megatron-Core would compute differently is
refused with the reason, and an absent key counts as our loader reads it. Runs in the default environment."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from moe_models import FAMILY_NAMES, MoEConfig
from moe_models.config import PRESETS, YarnScaling
from trainers.backend.config import MegatronBackendConfig
from trainers.backend.megatron.support import FAMILIES, LOADER_DEFAULTS, unsupported_config, with_loader_defaults

YARN = {"factor": 4.0, "original_max_position_embeddings": 512}


def _checkpoint(path: Path, cfg: MoEConfig | dict[str, Any]) -> str:
    path.mkdir()
    data = cfg if isinstance(cfg, dict) else cfg.to_hf_dict()
    (path / "config.json").write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("family", FAMILIES)
def test_every_preset_of_the_built_families_is_accepted(tmp_path: Path, family: str, preset: str) -> None:
    cfg = MoEConfig.preset(preset, vocab_size=40, model_type=family)
    assert MegatronBackendConfig().unsupported_checkpoint(_checkpoint(tmp_path / "ckpt", cfg)) == ""
    assert MegatronBackendConfig().unsupported_family(family) == ""


def test_the_other_families_are_refused_by_name(tmp_path: Path) -> None:
    for family in set(FAMILY_NAMES) - set(FAMILIES):
        cfg = MoEConfig.preset("tiny", vocab_size=40, model_type=family)
        got = MegatronBackendConfig().unsupported_checkpoint(_checkpoint(tmp_path / family, cfg))
        assert got == f"backend.kind megatron builds and maps {list(FAMILIES)} models only, got a {family} model"
        assert MegatronBackendConfig().unsupported_family(family) == got


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"num_experts_per_tok": 4}, r"num_experts_per_tok: expected 2 \* topk_group = 2 .*, got 4"),
        ({"norm_topk_prob": False}, r"norm_topk_prob / num_experts_per_tok: expected true / >= 2, got \(False, 2\)"),
        ({"num_experts_per_tok": 1}, r"norm_topk_prob / num_experts_per_tok: expected true / >= 2, got \(True, 1\)"),
        ({"rms_norm_eps": 1e-5}, "rms_norm_eps: expected 1e-06, got 1e-05"),
        ({"rope_scaling": YarnScaling(**YARN, attention_factor=1.1)}, r"attention_factor / truncate: .* got \(1.1"),
        ({"rope_scaling": YarnScaling(**YARN, truncate=False)}, r"attention_factor / truncate: .* got \(None, False"),
        ({"shared_expert_intermediate_size": 0}, "n_shared_experts: expected >= 1, got 0"),
        ({"tie_word_embeddings": True}, "tie_word_embeddings: expected False, got True"),
        ({"first_k_dense_replace": 4}, r"first_k_dense_replace: expected < num_hidden_layers \(4\), got 4"),
    ],
)
def test_a_deepseek_config_of_ours_that_megatron_computes_differently_is_refused_with_the_reason(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    cfg = MoEConfig.preset("tiny", vocab_size=40, model_type="deepseek_v3", **change)  # our model accepts it
    got = MegatronBackendConfig().unsupported_checkpoint(_checkpoint(tmp_path / "ckpt", cfg))
    assert got.startswith("megatron backend, DeepSeek-V3 ")
    assert got.endswith("(model_type deepseek_v3)")
    assert re.search(reason, got), got


def test_deepseek_group_limits_that_megatron_scores_like_transformers_are_accepted() -> None:
    every_group_kept = MoEConfig.preset("tiny", vocab_size=40, model_type="deepseek_v3", topk_group=2)
    scaling = YarnScaling(**YARN, mscale=1.0, mscale_all_dim=1.0)
    yarn = MoEConfig.preset("tiny", vocab_size=40, model_type="deepseek_v3", rope_scaling=scaling)
    assert unsupported_config({**every_group_kept.to_hf_dict(), "num_experts_per_tok": 3}) == ""
    assert unsupported_config(yarn.to_hf_dict()) == ""


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"norm_topk_prob": False}, "norm_topk_prob=False"),
        ({"tie_word_embeddings": True}, "tie_word_embeddings=True"),
        ({"mlp_only_layers": (1,)}, r"mlp_only_layers=\[1\]"),
        ({"decoder_sparse_step": 2}, "decoder_sparse_step=2"),
        ({"rope_scaling": YarnScaling(**YARN)}, "Qwen3-MoE RoPE: expected rope_type 'default'.*got 'yarn'"),
        ({"rope_theta": 10000.5}, "Qwen3-MoE RoPE: .*whole-number rope_theta.*got 'default', 10000.5"),
    ],
)
def test_a_qwen3_config_of_ours_that_the_megatron_build_does_not_compute_is_refused(
    change: dict[str, Any], reason: str
) -> None:
    got = unsupported_config(MoEConfig.preset("tiny", vocab_size=40, **change).to_hf_dict())
    assert got.startswith("megatron backend") and got.endswith("(model_type qwen3_moe)")
    assert re.search(reason, got), got


MINIMAL: dict[str, dict[str, Any]] = {  # config.json files that leave out every key they may
    "qwen3_moe": {"model_type": "qwen3_moe", "vocab_size": 40},
    "deepseek_v3": {
        "model_type": "deepseek_v3",
        "vocab_size": 40,
        "num_key_value_heads": 4,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 4,
        "v_head_dim": 8,
        "moe_intermediate_size": 16,  # our loader needs it (n_shared_experts times it is the shared expert's width)
        "n_shared_experts": None,
        "n_group": None,
    },
}


@pytest.mark.parametrize("family", FAMILIES)
def test_an_absent_or_null_key_counts_as_our_loader_reads_it(family: str) -> None:
    raw = MINIMAL[family]
    loaded = MoEConfig.from_hf_dict(raw).to_hf_dict()  # what the backend builds from
    filled = with_loader_defaults(raw)
    compared = [key for key in LOADER_DEFAULTS if key in loaded]
    assert len(compared) >= 10
    assert {k: filled[k] for k in compared} == {k: loaded[k] for k in compared}
    assert unsupported_config(raw) == unsupported_config(loaded)


def test_a_directory_without_config_json_is_refused(tmp_path: Path) -> None:
    got = MegatronBackendConfig().unsupported_checkpoint(str(tmp_path))
    assert got == f"backend.kind megatron: expected a checkpoint directory with config.json, got {tmp_path}"
