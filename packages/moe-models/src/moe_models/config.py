"""Model configuration with Hugging Face Qwen3-MoE field names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

_HF_ARCHITECTURE = "Qwen3MoeForCausalLM"
_HF_MODEL_TYPE = "qwen3_moe"

# Values of config.json keys that this implementation does not model; any other value changes the math.
_FIXED_HF_VALUES: dict[str, object] = {
    "hidden_act": "silu",
    "attention_bias": False,
    "use_sliding_window": False,
}

# Named model sizes for `MoEConfig.preset`: `tiny` is ~1-2M parameters at vocab ~100, `small` ~10-20M. Kept a
# literal: rl_tasks reads the names from this file's source, since importing any moe_models module imports torch.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 128,
        "intermediate_size": 256,
        "moe_intermediate_size": 96,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
    },
    "small": {
        "hidden_size": 256,
        "intermediate_size": 768,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 32,
        "num_experts": 16,
        "num_experts_per_tok": 2,
    },
}


@dataclass(frozen=True)
class MoEConfig:
    """A Qwen3-MoE decoder-only LM.

    Invariants: `num_attention_heads % num_key_value_heads == 0`, `head_dim` even, `1 <= num_experts_per_tok
    <= num_experts`, every index in `mlp_only_layers` is a layer index. A layer `i` is MoE iff
    `i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0` (Hugging Face's rule); MoE ordinals
    (routing row layer axis) count MoE layers only.
    """

    vocab_size: int
    hidden_size: int = 128
    intermediate_size: int = 256  # dense MLP width (layers in mlp_only_layers / off the sparse step)
    moe_intermediate_size: int = 64  # per-expert MLP width
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    num_experts: int = 8
    num_experts_per_tok: int = 2
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = field(default_factory=tuple)
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mlp_only_layers", tuple(int(i) for i in self.mlp_only_layers))
        positive = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "moe_intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "num_experts",
            "num_experts_per_tok",
            "decoder_sparse_step",
            "max_position_embeddings",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MoEConfig.{name}: got {value!r}, expected a positive int")
        self._validate_relations()

    def _validate_relations(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim: got {self.head_dim}, expected an even number (rotary halves)")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok: got {self.num_experts_per_tok}, expected <= num_experts={self.num_experts}"
            )
        bad = [i for i in self.mlp_only_layers if not 0 <= i < self.num_hidden_layers]
        if bad:
            raise ValueError(f"mlp_only_layers: got {bad}, expected indices in [0, {self.num_hidden_layers})")
        if self.rms_norm_eps <= 0 or self.rope_theta <= 0 or self.initializer_range <= 0:
            raise ValueError(
                f"rms_norm_eps={self.rms_norm_eps}, rope_theta={self.rope_theta}, "
                f"initializer_range={self.initializer_range}: expected all > 0"
            )
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}: got {value}, expected None or an id in [0, {self.vocab_size})")

    def is_moe_layer(self, layer_idx: int) -> bool:
        """Hugging Face's rule for which decoder layers hold a sparse MoE block."""
        return layer_idx not in self.mlp_only_layers and (layer_idx + 1) % self.decoder_sparse_step == 0

    @property
    def moe_layer_ids(self) -> tuple[int, ...]:
        """Absolute decoder-layer indices of the MoE layers, in order (index = MoE ordinal)."""
        return tuple(i for i in range(self.num_hidden_layers) if self.is_moe_layer(i))

    @property
    def num_moe_layers(self) -> int:
        return len(self.moe_layer_ids)

    def replace(self, **changes: Any) -> MoEConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, *, vocab_size: int, **overrides: Any) -> MoEConfig:
        """A size named in `PRESETS`, with `overrides` on top."""
        if name not in PRESETS:
            raise ValueError(f"preset: got {name!r}, expected one of {sorted(PRESETS)}")
        return cls(vocab_size=vocab_size, **{**PRESETS[name], **overrides})

    def to_hf_dict(self) -> dict[str, Any]:
        """The `config.json` content that `transformers.Qwen3MoeConfig` and vLLM read."""
        out: dict[str, Any] = {
            "architectures": [_HF_ARCHITECTURE],
            "model_type": _HF_MODEL_TYPE,
        }
        for f in dataclasses.fields(self):
            out[f.name] = getattr(self, f.name)
        out["mlp_only_layers"] = list(self.mlp_only_layers)
        out["rope_parameters"] = {"rope_type": "default", "rope_theta": self.rope_theta}
        out.update(_FIXED_HF_VALUES)
        out["sliding_window"] = None
        out["attention_dropout"] = 0.0
        out["torch_dtype"] = "float32"
        return out

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any]) -> MoEConfig:
        """Reads a Qwen3-MoE `config.json`; raises if it asks for math this implementation lacks.

        Keys that do not change the forward pass (dtype, use_cache, router_aux_loss_coef, ...) are not read.
        """
        if data.get("model_type") != _HF_MODEL_TYPE:
            raise ValueError(f"model_type: got {data.get('model_type')!r}, expected {_HF_MODEL_TYPE!r}")
        for key, expected in _FIXED_HF_VALUES.items():
            if key in data and data[key] != expected:
                raise ValueError(f"{key}: got {data[key]!r}, expected {expected!r} (not implemented otherwise)")
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in data and data[f.name] is not None:
                kwargs[f.name] = data[f.name]
        if "num_experts" not in kwargs and data.get("num_local_experts") is not None:
            kwargs["num_experts"] = data["num_local_experts"]
        rope = data.get("rope_parameters") or data.get("rope_scaling")
        if rope:
            rope_type = rope.get("rope_type", rope.get("type", "default"))
            if rope_type != "default":
                raise ValueError(f"rope type: got {rope_type!r}, expected 'default' (no rope scaling)")
            if "rope_theta" in rope:
                kwargs["rope_theta"] = rope["rope_theta"]
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if isinstance(kwargs.get(name), list):
                ids = kwargs[name]
                if len(ids) != 1:
                    raise ValueError(f"{name}: got {ids}, expected a single id")
                kwargs[name] = ids[0]
        kwargs["mlp_only_layers"] = tuple(kwargs.get("mlp_only_layers", ()))
        kwargs["rope_theta"] = float(kwargs.get("rope_theta", 10000.0))
        return cls(**kwargs)
