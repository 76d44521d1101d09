"""Which decoder layers of a Hugging Face MoE checkpoint route, read from its config.json (numpy only, so engine
adapters without torch can size routing rows): the rule of each supported family, by `model_type`. moe_models applies
the same rules to its own config (`MoEConfig.moe_layer_ids`); a test pins that the two agree."""

from __future__ import annotations

from collections.abc import Mapping

from routing_state.spec import RoutingSpec

_EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def moe_layers(config: Mapping[str, object]) -> tuple[int, ...]:
    """Decoder-layer indices of the MoE layers, ascending. Qwen families: not in `mlp_only_layers` and on the
    `decoder_sparse_step`; DeepSeek-V3: from `first_k_dense_replace` on; Mixtral and GPT-OSS: every layer."""
    model_type = config.get("model_type")
    layers = int(config["num_hidden_layers"])  # type: ignore[call-overload]
    if model_type in ("qwen3_moe", "qwen2_moe"):
        dense = {int(i) for i in config.get("mlp_only_layers") or []}  # type: ignore[union-attr]
        step = int(config.get("decoder_sparse_step") or 1)  # type: ignore[call-overload]
        return tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)
    if model_type == "deepseek_v3":
        return tuple(range(int(config.get("first_k_dense_replace") or 0), layers))  # type: ignore[call-overload]
    if model_type in ("mixtral", "gpt_oss"):
        return tuple(range(layers))
    raise ValueError(
        f"model_type: got {model_type!r}, expected one of qwen3_moe, qwen2_moe, mixtral, deepseek_v3, gpt_oss"
    )


def routing_spec(config: Mapping[str, object]) -> RoutingSpec | None:
    """The routing rows' spec of a checkpoint, with the decoder layer of each column; None for a dense model (no
    expert count in its config) or one whose layers are all dense."""
    experts = next((config[k] for k in _EXPERT_COUNT_KEYS if config.get(k)), None)
    if experts is None:
        return None
    layers = moe_layers(config)
    if not layers:
        return None
    top_k = int(config["num_experts_per_tok"])  # type: ignore[call-overload]
    return RoutingSpec(len(layers), top_k, int(experts), layers)  # type: ignore[call-overload]
