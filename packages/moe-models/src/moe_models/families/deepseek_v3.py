"""DeepSeek-V3 (`DeepseekV3ForCausalLM`): multi-head latent attention (q and k/v through low-rank projections, a
decoupled rotary part shared by all heads' keys, interleaved rotary pairs by default), a sigmoid router whose
selection adds `e_score_correction_bias` and keeps only the best `topk_group` of `n_group` expert groups, weights from
the plain scores (optionally renormalised) times `routed_scaling_factor`, routed plus shared experts, and dense MLP
layers for the first `first_k_dense_replace` layers."""

from __future__ import annotations

from typing import Any, ClassVar

from moe_models.config import MoEConfig
from moe_models.families.family import Family, FamilyTraits, State, rename_keys

_SHARED = ((".mlp.shared_expert.", ".mlp.shared_experts."),)
_MLA_DIMS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


class DeepseekV3(Family):
    name: ClassVar[str] = "deepseek_v3"
    architecture: ClassVar[str] = "DeepseekV3ForCausalLM"
    traits: ClassVar[FamilyTraits] = FamilyTraits(attention="mla", router="sigmoid_grouped")
    hf_renames: ClassVar[dict[str, str]] = {"n_routed_experts": "num_experts"}
    fixed_hf_values: ClassVar[dict[str, object]] = {"attention_bias": False}

    def is_moe_layer(self, config: MoEConfig, layer_idx: int) -> bool:
        return layer_idx >= config.first_k_dense_replace

    def validate(self, config: MoEConfig) -> None:
        bad = {name: getattr(config, name) for name in _MLA_DIMS if getattr(config, name) < 1}
        if bad or (config.q_lora_rank is not None and config.q_lora_rank < 1):
            raise ValueError(f"{self.name}: MLA dims got {bad or {'q_lora_rank': config.q_lora_rank}}, expected >= 1")
        if config.num_key_value_heads != config.num_attention_heads:
            raise ValueError(
                f"{self.name}: num_key_value_heads got {config.num_key_value_heads}, expected num_attention_heads="
                f"{config.num_attention_heads} (MLA expands keys and values per head)"
            )
        per_group, rest = divmod(config.num_experts, config.n_group)
        if rest or per_group < 2 or config.topk_group > config.n_group:
            raise ValueError(
                f"{self.name}: got {config.num_experts} experts, n_group {config.n_group}, topk_group "
                f"{config.topk_group}; expected groups of >= 2 experts dividing them, topk_group <= n_group"
            )
        if config.shared_expert_intermediate_size % config.moe_intermediate_size:
            raise ValueError(
                f"{self.name}: shared_expert_intermediate_size got {config.shared_expert_intermediate_size}, "
                f"expected a multiple of moe_intermediate_size={config.moe_intermediate_size} (n_shared_experts)"
            )
        if config.attention_bias or config.o_proj_bias or config.layer_types or config.mlp_only_layers:
            raise ValueError(f"{self.name}: expected no attention biases, sliding layers or mlp_only_layers")

    def preset_fields(self, size: dict[str, int]) -> dict[str, Any]:
        hidden = size["hidden_size"]
        return {
            "num_key_value_heads": size["num_attention_heads"],
            "q_lora_rank": hidden,  # smaller latents left the tiny model too weak to learn the default task
            "kv_lora_rank": hidden // 2,
            "qk_nope_head_dim": 32,
            "qk_rope_head_dim": 32,
            "v_head_dim": 32,
            "head_dim": 32,
            "rope_interleave": True,
            "first_k_dense_replace": 1,
            # DeepSeek-V3's proportion: a group scores by its top two experts, and top-k = 2 x the groups kept
            "n_group": max(2, size["num_experts_per_tok"]),
            "topk_group": max(1, size["num_experts_per_tok"] // 2),
            "routed_scaling_factor": 2.5,
            "shared_expert_intermediate_size": size["moe_intermediate_size"],
        }

    def from_hf(self, data: dict[str, Any]) -> dict[str, Any]:
        kwargs = super().from_hf(data)
        kwargs.setdefault("rope_interleave", True)  # transformers' default for this family
        kwargs["head_dim"] = kwargs.get("qk_rope_head_dim", kwargs.get("head_dim"))
        shared = int(data.get("n_shared_experts") or 0)
        if shared and data.get("moe_intermediate_size") is None:
            raise ValueError(f"{self.name}: config.json has n_shared_experts {shared} but no moe_intermediate_size")
        kwargs["shared_expert_intermediate_size"] = shared * int(data.get("moe_intermediate_size") or 0)
        return kwargs

    def to_hf(self, config: MoEConfig) -> dict[str, Any]:
        out = super().to_hf(config)
        for name in ("num_experts", "shared_expert_intermediate_size", "mlp_only_layers", "decoder_sparse_step"):
            out.pop(name)
        out["n_routed_experts"] = config.num_experts
        out["n_shared_experts"] = config.shared_expert_intermediate_size // config.moe_intermediate_size
        out["head_dim"] = config.qk_rope_head_dim
        out["qk_head_dim"] = config.key_dim
        return out

    def hf_unused_fields(self) -> tuple[str, ...]:
        return ("o_proj_bias", "sliding_window", "swiglu_alpha", "swiglu_limit", "attention_bias")

    def to_hf_state(self, state: State, config: MoEConfig) -> State:
        return rename_keys(state, _SHARED)

    def from_hf_state(self, state: State, config: MoEConfig) -> State:
        """Drops the multi-token-prediction layers real checkpoints carry (`model.layers.{num_hidden_layers}...`,
        which transformers ignores too) and renames the shared experts."""
        extra = f"model.layers.{config.num_hidden_layers}."
        renamed = rename_keys(state, tuple((b, a) for a, b in _SHARED))
        return {k: v for k, v in renamed.items() if not k.startswith(extra)}
