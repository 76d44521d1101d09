"""Mixtral (`MixtralForCausalLM`): GQA without q/k norm, every layer MoE with softmax top-k routing renormalised
over the k (the same as a softmax over the top-k logits), no shared expert, an optional sliding window on every
layer. On disk its MoE block is `block_sparse_moe` with per-expert `w1` (gate), `w3` (up), `w2` (down)."""

from __future__ import annotations

from typing import Any, ClassVar

from moe_models.config import MoEConfig
from moe_models.families.family import (
    _NOT_QWEN3,
    Family,
    FamilyTraits,
    State,
    fuse_experts,
    rename_keys,
    split_experts,
)

_DISK_NAMES = ("w1", "w3", "w2")  # gate, up, down


class Mixtral(Family):
    name: ClassVar[str] = "mixtral"
    architecture: ClassVar[str] = "MixtralForCausalLM"
    traits: ClassVar[FamilyTraits] = FamilyTraits()  # no q/k norm; everything else the base's
    hf_renames: ClassVar[dict[str, str]] = {
        "num_local_experts": "num_experts",
        "intermediate_size": "moe_intermediate_size",
    }
    fixed_hf_values: ClassVar[dict[str, object]] = {}

    def is_moe_layer(self, config: MoEConfig, layer_idx: int) -> bool:
        return True

    def validate(self, config: MoEConfig) -> None:
        if config.attention_bias or config.o_proj_bias or config.rope_interleave or config.mlp_only_layers:
            raise ValueError(f"{self.name}: expected no projection biases, interleaved rotary or dense layers")
        if not config.norm_topk_prob:
            raise ValueError(f"{self.name}: norm_topk_prob got False, expected True (Mixtral renormalises the top-k)")
        if config.layer_types and set(config.layer_types) != {"sliding_attention"}:
            raise ValueError(f"{self.name}: layer_types got {config.layer_types}, expected all sliding or none")

    def preset_fields(self, size: dict[str, int]) -> dict[str, Any]:
        return {}

    def from_hf(self, data: dict[str, Any]) -> dict[str, Any]:
        kwargs = super().from_hf(data)
        window = data.get("sliding_window")
        if window is not None:
            kwargs["sliding_window"] = int(window)
            kwargs["layer_types"] = ("sliding_attention",) * int(data["num_hidden_layers"])
        return kwargs

    def to_hf(self, config: MoEConfig) -> dict[str, Any]:
        out = super().to_hf(config)
        dropped = ("mlp_only_layers", "decoder_sparse_step", "norm_topk_prob", "num_experts", "moe_intermediate_size")
        for name in dropped:
            out.pop(name, None)
        out["num_local_experts"] = config.num_experts
        out["intermediate_size"] = config.moe_intermediate_size
        out["sliding_window"] = config.sliding_window if config.layer_types else None
        return out

    def hf_unused_fields(self) -> tuple[str, ...]:
        return tuple(f for f in _NOT_QWEN3 if f != "sliding_window")

    def to_disk(self, state: State, config: MoEConfig) -> State:
        return rename_keys(split_experts(state, _DISK_NAMES), ((".mlp.", ".block_sparse_moe."),))

    def from_disk(self, state: State, config: MoEConfig) -> State:
        return fuse_experts(rename_keys(state, ((".block_sparse_moe.", ".mlp."),)), config, _DISK_NAMES)
