"""Tiny random checkpoints of the MoE families beside Qwen3-MoE, written by transformers' own classes.

One builder per HF `model_type` (qwen2_moe, mixtral, deepseek_v3, gpt_oss): 2 MoE layers (DeepSeek-V3 adds one
dense first layer), 8 experts top-2, hidden 128, head_dim 32 (vLLM's CPU attention refuses head sizes below 32).
Router weights (and biases) are scaled up so that routing differs between tokens and seeds, and the LM head so
that next-token distributions are peaky. The reference for routing is the transformers router module's own
top-k indices, captured by a forward hook (each family's router returns `(logits, weights, indices)`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from engine_adapters_tiny_moe import EOS_ID, VOCAB_SIZE, save_tokenizer
from transformers import (
    AutoModelForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
)

NUM_EXPERTS = 8
TOP_K = 2
MAX_POSITIONS = 2048
_COMMON = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": MAX_POSITIONS,
    "bos_token_id": 0,
    "eos_token_id": EOS_ID,
    "pad_token_id": 2,
    "tie_word_embeddings": False,
    "dtype": "float32",
}


def _qwen2_moe() -> Qwen2MoeConfig:
    return Qwen2MoeConfig(
        **_COMMON,
        num_hidden_layers=2,
        intermediate_size=256,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=96,
        num_experts=NUM_EXPERTS,
        num_experts_per_tok=TOP_K,
        norm_topk_prob=False,  # the family's default: top-k softmax weights are not renormalised
    )


def _mixtral() -> MixtralConfig:
    return MixtralConfig(
        **_COMMON, num_hidden_layers=2, head_dim=32, intermediate_size=64, num_local_experts=NUM_EXPERTS,
        num_experts_per_tok=TOP_K,
    )  # fmt: skip


def _deepseek_v3() -> DeepseekV3Config:
    return DeepseekV3Config(
        **{**_COMMON, "num_key_value_heads": 4},  # MLA: one latent per token, expanded to every head
        num_hidden_layers=3,
        first_k_dense_replace=1,  # layer 0 is a dense MLP: routing rows have 2 columns (layers 1 and 2)
        intermediate_size=256,
        moe_intermediate_size=64,
        n_routed_experts=NUM_EXPERTS,
        num_experts_per_tok=TOP_K,
        n_shared_experts=1,
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        q_lora_rank=64,
        kv_lora_rank=512,  # vLLM's CPU MLA decode kernel only compiles latent 512 + rope 64 (head size 576)
        qk_nope_head_dim=32,
        qk_rope_head_dim=64,
        v_head_dim=32,
        num_nextn_predict_layers=0,
    )


def _gpt_oss() -> GptOssConfig:
    return GptOssConfig(
        **_COMMON,
        num_hidden_layers=2,
        head_dim=32,
        intermediate_size=64,
        num_local_experts=NUM_EXPERTS,
        num_experts_per_tok=TOP_K,
        sliding_window=8,  # layer 0 slides over 8 positions, layer 1 attends fully
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={
            "rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "original_max_position_embeddings": MAX_POSITIONS // 4, "truncate": False,
        },
    )  # fmt: skip


CONFIGS: dict[str, Callable[[], PretrainedConfig]] = {
    "qwen2_moe": _qwen2_moe,
    "mixtral": _mixtral,
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
}
_MODELS: dict[str, type[PreTrainedModel]] = {
    "qwen2_moe": Qwen2MoeForCausalLM,
    "mixtral": MixtralForCausalLM,
    "deepseek_v3": DeepseekV3ForCausalLM,
    "gpt_oss": GptOssForCausalLM,
}
_ROUTER_SUFFIXES = ("mlp.gate", "block_sparse_moe.gate", "mlp.router")


def _is_router(name: str, module: torch.nn.Module) -> bool:
    return name.endswith(_ROUTER_SUFFIXES) and isinstance(getattr(module, "weight", None), torch.nn.Parameter)


def tiny_model(family: str, seed: int) -> PreTrainedModel:
    """Random weights of `family`, random biases (x0.1; router biases and DeepSeek-V3's score correction x0.3),
    router weights x20, GPT-OSS sinks N(0, 1), LM head x10 with a zero EOS row."""
    torch.manual_seed(seed)
    model = _MODELS[family](CONFIGS[family]()).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):  # transformers initialises biases to 0: make every bias path matter
                param.copy_(0.1 * torch.randn_like(param))
        for name, module in model.named_modules():
            if _is_router(name, module):
                module.weight.mul_(20.0)
                for bias in ("bias", "e_score_correction_bias"):
                    if isinstance(getattr(module, bias, None), torch.Tensor):
                        getattr(module, bias).copy_(0.3 * torch.randn_like(getattr(module, bias)))
            elif name.endswith("self_attn") and isinstance(getattr(module, "sinks", None), torch.Tensor):
                module.sinks.copy_(torch.randn_like(module.sinks))
        model.lm_head.weight.mul_(10.0)
        model.lm_head.weight[EOS_ID] = 0.0
    return model


def save_checkpoint(family: str, folder: Path, seed: int) -> Path:
    """Config, safetensors (transformers' names) and tokenizer of `tiny_model(family, seed)` in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    tiny_model(family, seed).save_pretrained(folder)
    save_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": EOS_ID, "bos_token_id": 0}))
    return folder


def reference_forward(folder: Path, ids: list[int]) -> tuple[torch.Tensor, np.ndarray]:
    """(logits [T, V] fp32, router top-k ids [T, L_moe, K] sorted per row) of transformers on `folder`.

    The layer axis holds the MoE layers in layer order (dense layers have no router and no column).
    """
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    captured: list[torch.Tensor] = []
    hooks = [
        module.register_forward_hook(lambda _m, _a, out: captured.append(out[-1].detach().reshape(len(ids), -1)))
        for name, module in model.named_modules()
        if _is_router(name, module)
    ]
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
    finally:
        for hook in hooks:
            hook.remove()
    return logits, np.sort(torch.stack(captured, dim=1).numpy(), axis=-1)
