"""Qwen2-MoE (`Qwen2MoeForCausalLM`): GQA with q/k/v biases and no q/k norm, softmax top-k routing (not
renormalised by default), routed experts plus a shared expert whose output a sigmoid gate scales."""

from __future__ import annotations

from typing import Any, ClassVar

from moe_models.config import MoEConfig
from moe_models.families.family import _NOT_QWEN3, Family, FamilyTraits


class Qwen2Moe(Family):
    name: ClassVar[str] = "qwen2_moe"
    architecture: ClassVar[str] = "Qwen2MoeForCausalLM"
    traits: ClassVar[FamilyTraits] = FamilyTraits(shared_expert_gate=True)
    hf_renames: ClassVar[dict[str, str]] = {"qkv_bias": "attention_bias"}
    fixed_hf_values: ClassVar[dict[str, object]] = {"use_sliding_window": False}

    def validate(self, config: MoEConfig) -> None:
        if config.o_proj_bias or config.layer_types or config.rope_interleave:
            raise ValueError(f"{self.name}: expected no o_proj bias, sliding layers or interleaved rotary")
        if config.shared_expert_intermediate_size < 1:
            raise ValueError(
                f"{self.name}: shared_expert_intermediate_size got {config.shared_expert_intermediate_size}, "
                "expected >= 1 (every MoE layer has a shared expert)"
            )

    def preset_fields(self, size: dict[str, int]) -> dict[str, Any]:
        return {
            "attention_bias": True,
            "norm_topk_prob": False,
            "shared_expert_intermediate_size": 2 * size["moe_intermediate_size"],
        }

    def from_hf(self, data: dict[str, Any]) -> dict[str, Any]:
        kwargs = super().from_hf(data)
        kwargs.setdefault("attention_bias", True)  # transformers' default: Qwen2 projections have biases
        kwargs.setdefault("norm_topk_prob", False)
        return kwargs

    def to_hf(self, config: MoEConfig) -> dict[str, Any]:
        out = super().to_hf(config)
        out["qkv_bias"] = out.pop("attention_bias")
        return out

    def hf_unused_fields(self) -> tuple[str, ...]:
        return tuple(f for f in _NOT_QWEN3 if f != "shared_expert_intermediate_size")
