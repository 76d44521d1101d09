"""Family: everything one MoE family adds to the one model definition, in one place.

A family fixes what its forward computes (`FamilyTraits`, read by the model's modules), reads and writes its
`config.json` (`from_hf` / `to_hf`), decides which layers are MoE, names its size presets' extra fields, and maps
state-dict keys between this package's modules (the canonical names, which are transformers' Qwen3-MoE names) and
the family's checkpoint on disk (`to_disk` / `from_disk`) or transformers' in-memory model (`to_hf_state`).

The base class is the Qwen3-MoE behaviour; a family module overrides what differs.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from moe_models.config import FamilyTraits, YarnScaling

if TYPE_CHECKING:
    from moe_models.config import MoEConfig

State = dict[str, torch.Tensor]
PER_EXPERT = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<expert>\d+)\.(?P<proj>[a-z_0-9]+)\.weight$")


# config.json keys whose value must be this (any other value asks for math this implementation lacks)
FIXED_HF_VALUES: dict[str, object] = {"hidden_act": "silu"}
_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
_NOT_IN_CONFIG_JSON = ("tokenizer_vocab_size",)  # MoEConfig fields that describe the run, not the checkpoint


class Family:
    """The Qwen3-MoE family; subclasses override what their family changes."""

    name: ClassVar[str] = "qwen3_moe"
    architecture: ClassVar[str] = "Qwen3MoeForCausalLM"
    traits: ClassVar[FamilyTraits] = FamilyTraits(qk_norm=True)
    # config.json keys read into a differently named field (hf key -> field)
    hf_renames: ClassVar[dict[str, str]] = {"num_local_experts": "num_experts"}
    fixed_hf_values: ClassVar[dict[str, object]] = {"attention_bias": False, "use_sliding_window": False}

    # --- structure -------------------------------------------------------------------------------------------
    def is_moe_layer(self, config: MoEConfig, layer_idx: int) -> bool:
        """Hugging Face's Qwen rule: not in mlp_only_layers and on the sparse step."""
        return layer_idx not in config.mlp_only_layers and (layer_idx + 1) % config.decoder_sparse_step == 0

    def validate(self, config: MoEConfig) -> None:
        """Raises ValueError for settings this family cannot have (beyond MoEConfig's own checks)."""
        if config.attention_bias or config.o_proj_bias or config.layer_types or config.rope_interleave:
            raise ValueError(
                f"{self.name}: got attention_bias={config.attention_bias}, o_proj_bias={config.o_proj_bias}, "
                f"layer_types={config.layer_types}, rope_interleave={config.rope_interleave}; expected none"
            )

    def preset_fields(self, size: dict[str, int]) -> dict[str, Any]:
        """The fields this family adds to (or changes in) a size preset of `PRESETS`."""
        return {}

    # --- config.json -----------------------------------------------------------------------------------------
    def from_hf(self, data: dict[str, Any]) -> dict[str, Any]:
        """MoEConfig keyword arguments from a `config.json` of this family."""
        from moe_models.config import MoEConfig

        for key, expected in {**FIXED_HF_VALUES, **self.fixed_hf_values}.items():
            if key in data and data[key] is not None and data[key] != expected:
                raise ValueError(f"{self.name}: {key}: got {data[key]!r}, expected {expected!r} (not implemented)")
        names = {f.name for f in dataclasses.fields(MoEConfig)} - {"rope_scaling", "layer_types", "model_type"}
        names -= set(_NOT_IN_CONFIG_JSON)
        names -= set(self.hf_unused_fields())
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            target = self.hf_renames.get(key, key)
            if target in names and value is not None:
                kwargs[target] = value
        kwargs.update(_rope_fields(data))
        for name in _TOKEN_IDS:
            if isinstance(kwargs.get(name), list):
                ids = kwargs[name]
                if len(ids) != 1 and name != "eos_token_id":
                    raise ValueError(f"{name}: got {ids}, expected a single id")
                kwargs[name] = tuple(ids) if len(ids) != 1 else ids[0]
        kwargs["mlp_only_layers"] = tuple(kwargs.get("mlp_only_layers", ()))
        if kwargs.get("head_dim") is None and "hidden_size" in kwargs and "num_attention_heads" in kwargs:
            kwargs["head_dim"] = kwargs["hidden_size"] // kwargs["num_attention_heads"]
        kwargs["model_type"] = self.name
        return kwargs

    def to_hf(self, config: MoEConfig) -> dict[str, Any]:
        """The `config.json` content transformers' class of this family reads."""
        out: dict[str, Any] = {"architectures": [self.architecture], "model_type": self.name}
        for f in dataclasses.fields(config):
            if f.name not in ("rope_scaling", "rope_theta", "layer_types", "model_type", *_NOT_IN_CONFIG_JSON):
                out[f.name] = getattr(config, f.name)
        if isinstance(config.eos_token_id, tuple):
            out["eos_token_id"] = list(config.eos_token_id)
        out["mlp_only_layers"] = list(config.mlp_only_layers)
        out["rope_parameters"] = _rope_parameters(config)
        out.update(FIXED_HF_VALUES)
        out.update({k: v for k, v in self.fixed_hf_values.items() if k not in out})
        out["attention_dropout"] = 0.0
        out["torch_dtype"] = "float32"
        for name in self.hf_unused_fields():
            out.pop(name, None)
        return out

    def hf_unused_fields(self) -> tuple[str, ...]:
        """MoEConfig fields that this family's config.json does not carry."""
        return _NOT_QWEN3

    # --- state-dict keys -------------------------------------------------------------------------------------
    def to_hf_state(self, state: State, config: MoEConfig) -> State:
        """Canonical keys and layouts -> transformers' in-memory model of this family (Qwen3: the same)."""
        return dict(state)

    def from_hf_state(self, state: State, config: MoEConfig) -> State:
        return dict(state)

    def to_disk(self, state: State, config: MoEConfig) -> State:
        """Canonical -> the checkpoint transformers writes (experts split per expert)."""
        return split_experts(self.to_hf_state(state, config), ("gate_proj", "up_proj", "down_proj"))

    def from_disk(self, state: State, config: MoEConfig) -> State:
        """A checkpoint of this family (disk or in-memory layout) -> canonical."""
        return self.from_hf_state(fuse_experts(state, config, ("gate_proj", "up_proj", "down_proj")), config)


_NOT_QWEN3 = (
    "first_k_dense_replace",
    "rope_interleave",
    "o_proj_bias",
    "sliding_window",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "n_group",
    "topk_group",
    "routed_scaling_factor",
    "shared_expert_intermediate_size",
    "swiglu_alpha",
    "swiglu_limit",
)


def split_experts(state: State, names: tuple[str, str, str]) -> State:
    """Fused `...experts.gate_up_proj` [E, 2I, H] / `down_proj` [E, H, I] -> per-expert `[out, in]` matrices named
    `...experts.{e}.{names[0|1|2]}.weight` (gate, up, down)."""
    out: State = {}
    for name, tensor in state.items():
        if name.endswith(".experts.gate_up_proj"):
            prefix, inter = name[: -len(".gate_up_proj")], tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                out[f"{prefix}.{e}.{names[0]}.weight"] = tensor[e, :inter]
                out[f"{prefix}.{e}.{names[1]}.weight"] = tensor[e, inter:]
        elif name.endswith(".experts.down_proj"):
            prefix = name[: -len(".down_proj")]
            for e in range(tensor.shape[0]):
                out[f"{prefix}.{e}.{names[2]}.weight"] = tensor[e]
        else:
            out[name] = tensor
    return out


def fuse_experts(state: State, config: MoEConfig, names: tuple[str, str, str]) -> State:
    """Inverse of `split_experts`; keys that are not per-expert pass through (a fused checkpoint stays as it is)."""
    out: State = {}
    grouped: dict[str, dict[str, dict[int, torch.Tensor]]] = {}
    for name, tensor in state.items():
        match = PER_EXPERT.match(name)
        if match is None or match["proj"] not in names:
            out[name] = tensor
            continue
        grouped.setdefault(match["prefix"], {}).setdefault(match["proj"], {})[int(match["expert"])] = tensor
    for prefix, projs in grouped.items():
        stacked = []
        for proj in names:
            experts = projs.get(proj, {})
            if sorted(experts) != list(range(config.num_experts)):
                got, last = sorted(experts), config.num_experts - 1
                raise ValueError(f"{prefix}.*.{proj}: got experts {got}, expected 0..{last}")
            stacked.append(torch.stack([experts[e] for e in range(config.num_experts)]))
        out[f"{prefix}.gate_up_proj"] = torch.cat(stacked[:2], dim=1)
        out[f"{prefix}.down_proj"] = stacked[2]
    return out


def rename_keys(state: State, renames: tuple[tuple[str, str], ...]) -> State:
    """Each key with a `(old, new)` substring pair applied (every pair, in order)."""
    out: State = {}
    for name, tensor in state.items():
        for old, new in renames:
            name = name.replace(old, new)
        out[name] = tensor
    return out


def _rope_fields(data: dict[str, Any]) -> dict[str, Any]:
    """rope_theta and rope_scaling from `rope_parameters` (transformers 5) or `rope_scaling` + `rope_theta` (4.x)."""
    rope = dict(data.get("rope_parameters") or data.get("rope_scaling") or {})
    theta = rope.get("rope_theta", data.get("rope_theta", 10000.0))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return {"rope_theta": float(theta)}
    if kind != "yarn":
        raise ValueError(f"rope type: got {kind!r}, expected 'default' or 'yarn' (no other rope scaling)")
    original = rope.get("original_max_position_embeddings")
    if original is None:
        raise ValueError("rope_parameters: got yarn without original_max_position_embeddings, expected both")
    factor = rope.get("factor") or data["max_position_embeddings"] / original
    scaling = YarnScaling(
        factor=float(factor),
        original_max_position_embeddings=int(original),
        beta_fast=float(rope.get("beta_fast") or 32.0),
        beta_slow=float(rope.get("beta_slow") or 1.0),
        mscale=float(rope.get("mscale") or 0.0),
        mscale_all_dim=float(rope.get("mscale_all_dim") or 0.0),
        attention_factor=None if rope.get("attention_factor") is None else float(rope["attention_factor"]),
        truncate=bool(rope.get("truncate", True)),
    )
    return {"rope_theta": float(theta), "rope_scaling": scaling}


def _rope_parameters(config: MoEConfig) -> dict[str, Any]:
    scaling = config.rope_scaling
    if scaling is None:
        return {"rope_type": "default", "rope_theta": config.rope_theta}
    out: dict[str, Any] = {"rope_type": "yarn", "rope_theta": config.rope_theta, **dataclasses.asdict(scaling)}
    for key in ("mscale", "mscale_all_dim", "attention_factor"):
        if not out[key]:
            del out[key]
    return out
