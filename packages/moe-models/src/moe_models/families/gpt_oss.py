"""GPT-OSS (`GptOssForCausalLM`): GQA with biases on every projection and a learned sink logit per head, sliding
and full attention layers alternating (`layer_types`), YaRN rotary; a router with a bias whose top-k logits are
softmaxed; experts with biases and a clamped SwiGLU (gate * sigmoid(alpha * gate) * (up + 1)).

transformers keeps the experts fused on disk and in memory, transposed and interleaved against the canonical layout:
`gate_up_proj` [E, hidden, 2I] with gate in the even columns and up in the odd ones, `down_proj` [E, I, hidden]. The
router is `mlp.router`."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from moe_models.config import MoEConfig
from moe_models.families.family import Family, FamilyTraits, State, rename_keys

_ROUTER = ((".mlp.gate.", ".mlp.router."),)


class GptOss(Family):
    name: ClassVar[str] = "gpt_oss"
    architecture: ClassVar[str] = "GptOssForCausalLM"
    traits: ClassVar[FamilyTraits] = FamilyTraits(
        sinks=True,
        router="topk_softmax",
        router_bias=True,
        experts="clamped_swiglu",
        expert_bias=True,
        norm_weight_first=True,
    )
    hf_renames: ClassVar[dict[str, str]] = {
        "num_local_experts": "num_experts",
        "intermediate_size": "moe_intermediate_size",
    }
    fixed_hf_values: ClassVar[dict[str, object]] = {}

    def is_moe_layer(self, config: MoEConfig, layer_idx: int) -> bool:
        return True

    def validate(self, config: MoEConfig) -> None:
        if config.attention_bias != config.o_proj_bias or config.rope_interleave or config.mlp_only_layers:
            raise ValueError(
                f"{self.name}: got attention_bias={config.attention_bias}, o_proj_bias={config.o_proj_bias}; expected "
                "them equal (one attention_bias), no interleaved rotary, no dense layers"
            )

    def preset_fields(self, size: dict[str, int]) -> dict[str, Any]:
        from moe_models.config import YarnScaling

        layers = size["num_hidden_layers"]
        return {
            "attention_bias": True,
            "o_proj_bias": True,
            "sliding_window": 16,
            "layer_types": tuple("sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)),
            "rope_theta": 150000.0,
            "rope_scaling": YarnScaling(factor=32.0, original_max_position_embeddings=4096, truncate=False),
            "rms_norm_eps": 1e-5,
        }

    def from_hf(self, data: dict[str, Any]) -> dict[str, Any]:
        kwargs = super().from_hf(data)
        kwargs["o_proj_bias"] = kwargs.get("attention_bias", True)
        kwargs.setdefault("attention_bias", True)
        types = data.get("layer_types")
        if types is None:  # transformers' default: sliding on even layers
            types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(data["num_hidden_layers"])]
        kwargs["layer_types"] = tuple(types)
        return kwargs

    def to_hf(self, config: MoEConfig) -> dict[str, Any]:
        out = super().to_hf(config)
        for name in ("num_experts", "moe_intermediate_size", "o_proj_bias", "mlp_only_layers", "decoder_sparse_step"):
            out.pop(name, None)
        out["num_local_experts"] = config.num_experts
        out["intermediate_size"] = config.moe_intermediate_size
        out["layer_types"] = list(config.layer_types)
        return out

    def hf_unused_fields(self) -> tuple[str, ...]:
        return (
            "first_k_dense_replace",
            "rope_interleave",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
            "n_group",
            "topk_group",
            "routed_scaling_factor",
            "shared_expert_intermediate_size",
            "norm_topk_prob",
        )

    def to_hf_state(self, state: State, config: MoEConfig) -> State:
        out = rename_keys(state, _ROUTER)
        for name in list(out):
            if name.endswith(".experts.gate_up_proj"):  # [E, 2I, H] gate rows then up rows
                out[name] = _interleave(out[name].transpose(1, 2), dim=2)  # [E, H, 2I] gate even, up odd
            elif name.endswith(".experts.gate_up_proj_bias"):
                out[name] = _interleave(out[name], dim=1)
            elif name.endswith(".experts.down_proj"):
                out[name] = out[name].transpose(1, 2)  # [E, I, H]
        return out

    def from_hf_state(self, state: State, config: MoEConfig) -> State:
        """transformers' layout -> canonical; a state already canonical (its router is `mlp.gate`: the experts'
        names are the same in both layouts, their shapes not) passes through."""
        if not any(".mlp.router." in name for name in state):
            return dict(state)
        out = rename_keys(state, tuple((b, a) for a, b in _ROUTER))
        for name in list(out):
            if name.endswith(".experts.gate_up_proj"):
                out[name] = _deinterleave(out[name], dim=2).transpose(1, 2)
            elif name.endswith(".experts.gate_up_proj_bias"):
                out[name] = _deinterleave(out[name], dim=1)
            elif name.endswith(".experts.down_proj"):
                out[name] = out[name].transpose(1, 2)
        return out

    def to_disk(self, state: State, config: MoEConfig) -> State:
        return self.to_hf_state(state, config)

    def from_disk(self, state: State, config: MoEConfig) -> State:
        return self.from_hf_state(state, config)


def _interleave(t: torch.Tensor, dim: int) -> torch.Tensor:
    """[..., 2I, ...] halves (gate, up) along `dim` -> alternating gate_0, up_0, gate_1, up_1, ... along `dim`."""
    gate, up = t.chunk(2, dim=dim)
    return torch.stack((gate, up), dim=dim + 1).flatten(dim, dim + 1)


def _deinterleave(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Inverse of `_interleave`: even entries (gate) first, then odd ones (up), along `dim`."""
    index = torch.arange(t.shape[dim], device=t.device)
    return torch.cat((t.index_select(dim, index[0::2]), t.index_select(dim, index[1::2])), dim=dim)
