"""DeepSeek-V3 (transformers' `DeepseekV3ForCausalLM`, from its `config.json` dict) as a Megatron-Core `GPTModel`:
multi-latent attention from the local layer spec, dense MLPs in the first `first_k_dense_replace` layers, and MoE
layers with a sigmoid router whose `e_score_correction_bias` (Megatron's `expert_bias`) only selects experts,
group-limited top-k, renormalised top-k weights times `routed_scaling_factor`, and shared experts. Weights come from
the HF in-memory state dict (`deepseek_convert`); logits for a right-padded batch from `gpt.gpt_logits`.

What transformers computes and what Megatron-Core 0.19.2 computes agree only on part of the config space; outside it
`mla_transformer_config` raises rather than build a model that computes something else:
- group-limited routing: transformers scores a group by the sum of its top 2 scores, Megatron by its top
  `topk / topk_group`; so `num_experts_per_tok == 2 * topk_group` unless every group is kept (`topk_group ==
  n_group`, then no group limit is built);
- Megatron's sigmoid router always renormalises more than one weight: `norm_topk_prob` true, top-k > 1;
- the q/kv latent norms (`q_a_layernorm`, `kv_a_layernorm`) use transformers' default eps 1e-6, Megatron's use
  `layernorm_epsilon` like every other norm: `rms_norm_eps` must be 1e-6;
- RoPE `default` or `yarn` with `factor`, `original_max_position_embeddings` and either both `mscale` and
  `mscale_all_dim` or `mscale_all_dim` alone (transformers' `attention_factor` and Megatron's concentration factor
  are the same function there), `truncate` true, no `attention_factor`, no partial rotary;
- no attention bias, untied embeddings, SiLU, dropout 0, `num_key_value_heads == num_attention_heads`, at least one
  shared expert and at least one MoE layer. The multi-token-prediction layers (`num_nextn_predict_layers`) are not
  part of transformers' forward and are not built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from megatron.core.transformer.transformer_config import MLATransformerConfig

from trainers.backend.megatron import compat
from trainers.backend.megatron.deepseek_convert import MlaShape, hf_to_megatron

HFConfig = Mapping[str, Any]


def _refuse(what: str, expected: str, got: object) -> None:
    raise ValueError(f"megatron backend, DeepSeek-V3 {what}: expected {expected}, got {got!r}")


def rope_settings(cfg: HFConfig) -> dict[str, Any]:
    """MLATransformerConfig's RoPE fields from transformers' `rope_parameters` (or the older `rope_theta` plus
    `rope_scaling`)."""
    params = dict(cfg.get("rope_parameters") or {})
    if not params:
        params = {**(cfg.get("rope_scaling") or {}), "rope_theta": cfg.get("rope_theta")}
    kind = params.get("rope_type", params.get("type", "default"))
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        _refuse("rope_parameters.partial_rotary_factor", "1.0", params["partial_rotary_factor"])
    base = params.get("rope_theta") or cfg.get("rope_theta")
    if base is None:
        _refuse("rope_theta", "a number (in rope_parameters or at the top level)", None)
    base = float(base)
    if kind == "default":
        return {"rope_type": "rope", "rotary_base": base, "rotary_scaling_factor": 1.0, "mscale_all_dim": 0.0}
    if kind != "yarn":
        _refuse("rope_parameters.rope_type", "'default' or 'yarn'", kind)
    if params.get("attention_factor") is not None or params.get("truncate", True) is not True:
        got = (params.get("attention_factor"), params.get("truncate"))
        _refuse("yarn attention_factor / truncate", "unset / true (or unset)", got)
    original = params.get("original_max_position_embeddings")
    if original is None:
        _refuse("rope_parameters.original_max_position_embeddings", "an int for yarn", None)
    factor = params.get("factor") or cfg["max_position_embeddings"] / original
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if not mscale and mscale_all_dim:
        _refuse("yarn mscale", "set wherever mscale_all_dim is", (mscale, mscale_all_dim))
    return {
        "rope_type": "yarn",
        "rotary_base": base,
        "rotary_scaling_factor": float(factor),
        "original_max_position_embeddings": int(original),
        "beta_fast": float(params.get("beta_fast") or 32),
        "beta_slow": float(params.get("beta_slow") or 1),
        # transformers: attention_factor m(f, mscale) / m(f, mscale_all_dim) when both are set, else m(f, 1);
        # softmax scale times m(f, mscale_all_dim)^2 when it is set. Megatron: the same ratio and square, with
        # m(f, 0) = 1.
        "mscale": float(mscale) if mscale and mscale_all_dim else 1.0,
        "mscale_all_dim": float(mscale_all_dim or 0.0),
    }


def routing_settings(cfg: HFConfig) -> dict[str, Any]:
    """The router's fields: sigmoid scores, expert bias for selection, group-limited top-k, scaling factor."""
    experts, top_k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    groups, keep = cfg["n_group"], cfg["topk_group"]
    if not cfg["norm_topk_prob"] or top_k < 2:
        _refuse("norm_topk_prob / num_experts_per_tok", "true / >= 2", (cfg["norm_topk_prob"], top_k))
    if not isinstance(groups, int) or not isinstance(keep, int) or experts % groups or not 1 <= keep <= groups:
        _refuse("n_group / topk_group", f"n_group dividing {experts}, 1 <= topk_group <= n_group", (groups, keep))
    limited = keep < groups
    if limited and top_k != 2 * keep:
        _refuse("num_experts_per_tok", f"2 * topk_group = {2 * keep} (group score = sum of its top 2)", top_k)
    return {
        "num_moe_experts": experts,
        "moe_router_topk": top_k,
        "moe_router_score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "moe_router_bias_update_rate": 0.0,  # the bias is the checkpoint's buffer; it is never updated here
        "moe_router_num_groups": groups if limited else None,
        "moe_router_group_topk": keep if limited else None,
        "moe_router_topk_scaling_factor": float(cfg["routed_scaling_factor"]),
        "moe_router_load_balancing_type": "none",
        "moe_aux_loss_coeff": 0.0,
        "moe_token_dispatcher_type": "allgather",
    }


def _check_supported(cfg: HFConfig) -> None:
    checks = {
        "attention_bias": (cfg.get("attention_bias", False), False),
        "tie_word_embeddings": (cfg.get("tie_word_embeddings", False), False),
        "hidden_act": (cfg.get("hidden_act", "silu"), "silu"),
        "attention_dropout": (cfg.get("attention_dropout", 0.0), 0.0),
        "rms_norm_eps": (cfg.get("rms_norm_eps", 1e-6), 1e-6),
        "num_key_value_heads": (cfg.get("num_key_value_heads", cfg["num_attention_heads"]), cfg["num_attention_heads"]),
    }
    for name, (got, expected) in checks.items():
        if got != expected:
            _refuse(name, repr(expected), got)
    if cfg["n_shared_experts"] < 1:
        _refuse("n_shared_experts", ">= 1", cfg["n_shared_experts"])
    layers, dense = cfg["num_hidden_layers"], cfg["first_k_dense_replace"]
    if not dense < layers:
        _refuse("first_k_dense_replace", f"< num_hidden_layers ({layers})", dense)


def mla_transformer_config(cfg: HFConfig) -> MLATransformerConfig:
    """The Megatron config of a DeepSeek-V3 `config.json` dict (fp32, no dropout, no fusions). Fields whose
    transformers default is not what an absent key would suggest (`q_lora_rank`, `n_group`, `topk_group`,
    `norm_topk_prob`, `routed_scaling_factor`, `n_shared_experts`) must be present, as transformers writes them."""
    _check_supported(cfg)
    layers, dense = cfg["num_hidden_layers"], cfg["first_k_dense_replace"]
    tc = MLATransformerConfig(
        num_layers=layers,
        hidden_size=cfg["hidden_size"],
        num_attention_heads=cfg["num_attention_heads"],
        ffn_hidden_size=cfg["intermediate_size"],
        q_lora_rank=cfg["q_lora_rank"],
        kv_lora_rank=cfg["kv_lora_rank"],
        qk_head_dim=cfg["qk_nope_head_dim"],
        qk_pos_emb_head_dim=cfg["qk_rope_head_dim"],
        v_head_dim=cfg["v_head_dim"],
        **rope_settings(cfg),
        moe_ffn_hidden_size=cfg["moe_intermediate_size"],
        moe_shared_expert_intermediate_size=cfg["n_shared_experts"] * cfg["moe_intermediate_size"],
        moe_layer_freq=[0] * dense + [1] * (layers - dense),
        **routing_settings(cfg),
        normalization="RMSNorm",
        layernorm_epsilon=cfg.get("rms_norm_eps", 1e-6),
        qk_layernorm=True,  # under MLA: the q and kv latent norms
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        transformer_impl="local",
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        persist_layer_norm=False,
        bias_activation_fusion=False,
        apply_rope_fusion=False,
        masked_softmax_fusion=False,
        gradient_accumulation_fusion=False,
    )
    compat.check_no_dropout(tc)
    return tc


def block_spec(tc: MLATransformerConfig) -> TransformerBlockSubmodules:
    """Megatron's local layer specs, dense for the first layers (`tc.moe_layer_freq`), multi-latent attention
    through compat workarounds 4 and 5."""
    block = get_gpt_decoder_block_spec(tc, use_transformer_engine=False, normalization="RMSNorm")
    for spec in block.layer_specs:
        attention = spec.submodules.self_attention
        attention.module = compat.LocalMLASelfAttention
        attention.submodules.core_attention = compat.MlaDotProductAttention
        if tc.q_lora_rank is None:  # no query latent, so no query norm (Megatron refuses one)
            attention.submodules.q_layernorm = IdentityOp
    return block


def build_deepseek_gpt(
    cfg: HFConfig, hf_state: Mapping[str, torch.Tensor], *, ep_size: int = 1, ep_rank: int = 0
) -> GPTModel:
    """The model with this expert-parallel rank's weights (Megatron's parallel state must be initialised with
    `expert_model_parallel_size=ep_size`). `hf_state`: `DeepseekV3ForCausalLM.state_dict()` names and layout,
    including each MoE layer's `e_score_correction_bias`."""
    compat.install()
    tc = mla_transformer_config(cfg)
    model = GPTModel(
        config=tc,
        transformer_layer_spec=block_spec(tc),
        vocab_size=cfg["vocab_size"],
        max_sequence_length=cfg["max_position_embeddings"],
        position_embedding_type="rope",  # under MLA the attention layers hold their own (rope or yarn) embedding
        share_embeddings_and_output_weights=False,
    )
    weights = hf_to_megatron(hf_state, MlaShape.from_hf_config(cfg, ep_size=ep_size, ep_rank=ep_rank))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    if missing or unexpected:
        raise ValueError(f"megatron DeepSeek-V3 weights: missing {missing}, unexpected {unexpected}")
    return model
