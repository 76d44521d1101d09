"""Which models the Megatron build trains, decided from a `config.json` dict with the standard library only (no
torch, no Megatron), so a run can be refused before anything is built; `gpt` and `deepseek_gpt` build through the
same checks, so what is refused here is exactly what their builds refuse.

Qwen3-MoE (`gpt`): every layer MoE, untied embeddings, renormalised top-k, default RoPE with a whole-number base.

DeepSeek-V3 (`deepseek_gpt`): transformers and Megatron-Core 0.19.2 agree only on part of the config space; outside
it the build raises rather than compute something else:
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
  shared expert and at least one MoE layer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HFConfig = Mapping[str, Any]
FAMILIES = ("qwen3_moe", "deepseek_v3")  # what `family_build` builds
# What our loader (`moe_models.MoEConfig.from_hf_dict`) takes for a key a config.json leaves out or sets to null
# (`MoEConfig`'s defaults), for the keys these checks read; the backend builds from the config it loaded.
LOADER_DEFAULTS: dict[str, Any] = {
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "first_k_dense_replace": 0,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "max_position_embeddings": 2048,
    "attention_bias": False,
    "n_group": 1,
    "topk_group": 1,
    "routed_scaling_factor": 1.0,
    "n_shared_experts": 0,
    "tie_word_embeddings": False,
}


def _refuse(what: str, expected: str, got: object) -> None:
    raise ValueError(f"megatron backend, DeepSeek-V3 {what}: expected {expected}, got {got!r}")


def rope_parameters(cfg: HFConfig) -> dict[str, Any]:
    """transformers' `rope_parameters`, or the older `rope_scaling` plus `rope_theta`."""
    params = dict(cfg.get("rope_parameters") or {})
    if not params:
        params = {**(cfg.get("rope_scaling") or {}), "rope_theta": cfg.get("rope_theta")}
    return params


def rope_settings(cfg: HFConfig) -> dict[str, Any]:
    """MLATransformerConfig's RoPE fields of a DeepSeek-V3 config."""
    params = rope_parameters(cfg)
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
    """The DeepSeek-V3 router's fields: sigmoid scores, expert bias for selection, group-limited top-k, scaling."""
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


def check_deepseek(cfg: HFConfig) -> None:
    """Raises ValueError (got/expected) for a DeepSeek-V3 config the Megatron build would compute differently."""
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
    rope_settings(cfg)
    routing_settings(cfg)


def check_qwen3(cfg: HFConfig) -> None:
    """Raises ValueError (got/expected) for a Qwen3-MoE config the Megatron build does not compute."""
    got = {key: cfg.get(key, LOADER_DEFAULTS[key]) for key in ("decoder_sparse_step", "tie_word_embeddings")}
    got["mlp_only_layers"] = list(cfg.get("mlp_only_layers") or [])
    got["norm_topk_prob"] = cfg.get("norm_topk_prob", LOADER_DEFAULTS["norm_topk_prob"])
    if got != {"decoder_sparse_step": 1, "tie_word_embeddings": False, "mlp_only_layers": [], "norm_topk_prob": True}:
        raise ValueError(
            "megatron backend: expected every layer MoE, untied embeddings and norm_topk_prob; got "
            + ", ".join(f"{k}={v}" for k, v in got.items())
        )
    params = rope_parameters(cfg)
    kind = params.get("rope_type", params.get("type", "default"))
    theta = params.get("rope_theta") or cfg.get("rope_theta") or LOADER_DEFAULTS["rope_theta"]
    if kind != "default" or float(theta) != int(theta):
        raise ValueError(
            f"megatron backend, Qwen3-MoE RoPE: expected rope_type 'default' with a whole-number rope_theta (the "
            f"build's rotary_base is an int), got {kind!r}, {theta!r}"
        )


def with_loader_defaults(cfg: HFConfig) -> dict[str, Any]:
    """`cfg` with every key these checks read that is absent or null set as our loader sets it (`q_lora_rank`
    null stays null: no query latent)."""
    out = dict(cfg)
    for key, value in LOADER_DEFAULTS.items():
        if out.get(key) is None:
            out[key] = value
    out.setdefault("q_lora_rank", None)
    return out


def unsupported_config(cfg: HFConfig) -> str:
    """Why the Megatron build refuses this `config.json` dict (its `model_type` decides the family), or ""."""
    kind = cfg.get("model_type")
    if kind not in FAMILIES:
        return f"backend.kind megatron builds and maps {list(FAMILIES)} models only, got a {kind} model"
    try:
        (check_deepseek if kind == "deepseek_v3" else check_qwen3)(with_loader_defaults(cfg))
    except ValueError as e:
        return f"{e} (model_type {kind})"
    return ""


def unsupported_checkpoint(checkpoint_dir: str | Path) -> str:
    """`unsupported_config` of a checkpoint directory's config.json; a directory without one is refused."""
    config_file = Path(checkpoint_dir) / "config.json"
    if not config_file.is_file():
        return f"backend.kind megatron: expected a checkpoint directory with config.json, got {checkpoint_dir}"
    data = json.loads(config_file.read_text())
    if not isinstance(data, dict):
        return f"backend.kind megatron: expected {config_file} to hold a JSON object, got {type(data).__name__}"
    return unsupported_config(data)
