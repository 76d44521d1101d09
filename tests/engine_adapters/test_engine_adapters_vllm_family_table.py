"""The table of model families the vLLM adapter serves on CPU, and how the server command uses it (no vLLM needed)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from engine_adapters.vllm import EXTENSION_DIR, VLLMServerConfig
from rollout_core.vllm_families import (
    VLLM_FAMILIES,
    VLLMFamily,
    check_vllm_cpu_config,
    check_vllm_cpu_family,
    read_model_type,
)

FAMILY_KEYS = {"qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3", "gpt_oss"}


def test_table_names_the_five_families_by_hf_model_type() -> None:
    assert set(VLLM_FAMILIES) == FAMILY_KEYS
    assert all(key == fam.model_type and fam.architecture.endswith("ForCausalLM") for key, fam in VLLM_FAMILIES.items())


def test_a_family_has_a_reason_exactly_when_it_is_not_served() -> None:
    assert all(fam.served_on_cpu and fam.reason == "" for fam in VLLM_FAMILIES.values())
    refused = VLLMFamily("x_moe", "XMoeForCausalLM", False, reason="no CPU kernel for X")
    with pytest.raises(ValueError, match="not served on CPU: no CPU kernel for X"):
        check_vllm_cpu_family("x_moe", {"x_moe": refused})
    with pytest.raises(ValueError, match="expected a reason exactly when not served"):
        VLLMFamily("y_moe", "YMoeForCausalLM", False)
    with pytest.raises(ValueError, match="expected a reason exactly when not served"):
        VLLMFamily("y_moe", "YMoeForCausalLM", True, reason="but it is served")


def test_check_refuses_an_unknown_family_and_lists_the_known_ones() -> None:
    assert check_vllm_cpu_family("mixtral") is VLLM_FAMILIES["mixtral"]
    with pytest.raises(ValueError, match=r"'llama' is not a known family; expected one of \['deepseek_v3'"):
        check_vllm_cpu_family("llama")


def test_deepseek_v3_on_cpu_needs_the_mla_latent_the_cpu_kernel_compiles() -> None:
    good = {"model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    assert check_vllm_cpu_config(good).model_type == "deepseek_v3"
    with pytest.raises(ValueError, match="MLA latent"):
        check_vllm_cpu_config({**good, "kv_lora_rank": 64})
    assert check_vllm_cpu_config({"model_type": "gpt_oss"}).model_type == "gpt_oss"


def test_server_command_carries_the_family_arguments() -> None:
    deepseek = VLLMServerConfig(model="/m", python=Path("/py"), model_type="deepseek_v3").command(1)
    overrides = json.loads(deepseek[deepseek.index("--hf-overrides") + 1])
    assert overrides == {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}
    assert json.loads(deepseek[deepseek.index("--compilation-config") + 1]) == {"custom_ops": ["-rotary_embedding"]}
    plain = VLLMServerConfig(model="/m", python=Path("/py"), model_type="mixtral").command(1)
    assert "--hf-overrides" not in plain and plain == VLLMServerConfig(model="/m", python=Path("/py")).command(1)
    with pytest.raises(ValueError, match="model_type: expected one of"):
        VLLMServerConfig(model="/m", python=Path("/py"), model_type="llama")


def test_read_model_type_reads_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    assert read_model_type(tmp_path) == "gpt_oss"
    with pytest.raises(ValueError, match=r"expected an HF folder with config\.json"):
        read_model_type(tmp_path / "missing")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": 3}))
    with pytest.raises(ValueError, match="expected a string model_type"):
        read_model_type(tmp_path)


def _dict_keys(source: str, name: str) -> set[str]:
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            assert isinstance(node.value, ast.Dict)
            return {ast.literal_eval(k) for k in node.value.keys if k is not None}
    raise AssertionError(f"{name} not found")


def test_every_served_family_has_an_expert_layout_in_the_worker_extension() -> None:
    source = (EXTENSION_DIR / "moe_rl_expert_repack.py").read_text()  # read, not imported: it needs torch
    layouts = _dict_keys(source, "PER_EXPERT_LAYOUTS") | _dict_keys(source, "FUSED_LAYOUTS")
    assert layouts == {f for f, fam in VLLM_FAMILIES.items() if fam.served_on_cpu}
