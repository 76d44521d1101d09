"""Model configuration: one dataclass for every supported MoE family, with Hugging Face field names.

A family (`model_type`) fixes what its forward computes (its `FamilyTraits`: attention kind, router, expert
activation, ...); the fields below are the sizes and the switches its `config.json` may set. Each family's module in
`moe_models.families` maps its `config.json` and its checkpoint keys to and from this class.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

# The supported families by Hugging Face `model_type`. Kept a literal: rl_tasks reads it (and PRESETS) from this
# file's source, since importing any moe_models module imports torch.
FAMILY_NAMES = ("qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3", "gpt_oss")

# Named model sizes for `MoEConfig.preset`, shared by every family (a family adds its own fields to a size:
# `Family.preset_fields`). `tiny` is ~1-2M parameters over a vocabulary trained on the task's text (~40-100 tokens);
# `small` and `base` have production proportions and vocabulary (FULL_VOCAB_PRESETS): 151,936 embedding rows, 42M and
# 315M parameters in all for Qwen3-MoE, of which a token multiplies 0.6M and 27M besides the head's 19M and 78M.
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
        "hidden_size": 128,
        "intermediate_size": 384,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_experts": 16,
        "num_experts_per_tok": 2,
    },
    "base": {
        "hidden_size": 512,
        "intermediate_size": 1536,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 12,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_experts": 64,
        "num_experts_per_tok": 8,
    },
}

# Presets of production vocabulary: their models have 151,936 embedding rows and their warm-up's tokenizer is the
# 151,669-id Qwen-layout one (`moe_models.full_vocab`), whose first merges are learned from the task's text. Kept a
# literal, as PRESETS is (rl_tasks reads both from this file's source).
FULL_VOCAB_PRESETS = ("small", "base")

LayerType = Literal["full_attention", "sliding_attention"]


@dataclass(frozen=True)
class FamilyTraits:
    """What a family's forward computes.

    attention: `gqa` (q/k/v projections, grouped KV heads) or `mla` (DeepSeek's multi-head latent attention).
    qk_norm: per-head RMSNorm of q and k before rotary (Qwen3). sinks: a learned per-head logit in every softmax's
    denominator (GPT-OSS). router: `softmax` (softmax over all experts, top-k, optionally renormalised),
    `topk_softmax` (top-k logits, softmax over those k), `sigmoid_grouped` (sigmoid scores; selection on scores plus
    a correction bias, limited to the best groups; weights from the plain scores, scaled). experts: `swiglu`
    (down(silu(gate) * up)) or `clamped_swiglu` (GPT-OSS: clamped, gate * sigmoid(alpha * gate) * (up + 1)).
    shared_expert_gate: the shared expert's output is scaled by sigmoid(a gate projection) (Qwen2-MoE).
    norm_weight_first: RMSNorm multiplies by its weight before casting back to the input dtype (GPT-OSS).
    """

    attention: Literal["gqa", "mla"] = "gqa"
    qk_norm: bool = False
    sinks: bool = False
    router: Literal["softmax", "topk_softmax", "sigmoid_grouped"] = "softmax"
    router_bias: bool = False
    experts: Literal["swiglu", "clamped_swiglu"] = "swiglu"
    expert_bias: bool = False
    shared_expert_gate: bool = False
    norm_weight_first: bool = False


@dataclass(frozen=True)
class YarnScaling:
    """YaRN rotary scaling (`rope_parameters` with `rope_type: yarn`), as DeepSeek-V3 and GPT-OSS checkpoints set it.

    `mscale`/`mscale_all_dim` 0 mean absent; `attention_factor` None means derived from `factor` (and the two
    mscales when both are set). `truncate` rounds the correction range to whole dimensions."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 0.0
    mscale_all_dim: float = 0.0
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self) -> None:
        if self.factor < 1 or self.original_max_position_embeddings < 1:
            raise ValueError(
                f"YarnScaling: got factor {self.factor}, original_max_position_embeddings "
                f"{self.original_max_position_embeddings}, expected factor >= 1 and a positive length"
            )


@dataclass(frozen=True)
class MoEConfig:
    """A decoder-only MoE LM of one of `FAMILY_NAMES`.

    Invariants: `num_attention_heads % num_key_value_heads == 0`, even rotary dims, `1 <= num_experts_per_tok <=
    num_experts`, every index in `mlp_only_layers` is a layer index, `layer_types` names every layer (or is empty:
    all full attention), a sliding layer implies `sliding_window`. Which layers are MoE is the family's rule
    (`Family.is_moe_layer`); MoE ordinals (the routing rows' layer axis) count MoE layers only, in layer order.
    Fields a family does not read keep their defaults (`Family.from_hf` never sets them).
    """

    vocab_size: int
    model_type: str = "qwen3_moe"
    hidden_size: int = 128
    intermediate_size: int = 256  # dense MLP width (layers that are not MoE)
    moe_intermediate_size: int = 64  # per-expert MLP width
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32  # GQA: per head; MLA: unused (see the MLA dims)
    num_experts: int = 8
    num_experts_per_tok: int = 2
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = field(default_factory=tuple)
    first_k_dense_replace: int = 0  # DeepSeek: the first k layers are dense
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: YarnScaling | None = None
    rope_interleave: bool = False  # DeepSeek: rotary pairs are adjacent dims (x0, x1), (x2, x3), ...
    max_position_embeddings: int = 2048
    attention_bias: bool = False  # q/k/v projection biases
    o_proj_bias: bool = False
    sliding_window: int | None = None
    layer_types: tuple[LayerType, ...] = field(default_factory=tuple)
    # MLA (deepseek_v3): q through a rank-q_lora_rank bottleneck (None: one q_proj), k/v through kv_lora_rank
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # routers and experts
    n_group: int = 1  # DeepSeek group-limited routing: experts in n_group groups, the best topk_group groups
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    shared_expert_intermediate_size: int = 0  # 0: no shared expert
    swiglu_alpha: float = 1.702  # GPT-OSS: glu = gate * sigmoid(alpha * gate)
    swiglu_limit: float = 7.0  # GPT-OSS: gate <= limit, |up| <= limit
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None  # config.json may list several
    pad_token_id: int | None = None
    # Not a config.json field: the ids the run's tokenizer defines, when the embedding has more rows (checkpoints pad
    # their vocabulary, e.g. 151,936 rows for Qwen's 151,669 ids). Rows at or beyond it are never scored: the logits
    # have `logit_vocab_size` columns, so no engine samples a padding id and no log-prob gives one probability.
    tokenizer_vocab_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mlp_only_layers", tuple(int(i) for i in self.mlp_only_layers))
        object.__setattr__(self, "layer_types", tuple(self.layer_types))
        if isinstance(self.eos_token_id, list | tuple):
            object.__setattr__(self, "eos_token_id", tuple(int(i) for i in self.eos_token_id))
        if self.model_type not in FAMILY_NAMES:
            raise ValueError(f"model_type: got {self.model_type!r}, expected one of {list(FAMILY_NAMES)}")
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
            "n_group",
            "topk_group",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MoEConfig.{name}: got {value!r}, expected a positive int")
        self._validate_relations()
        _family(self.model_type).validate(self)

    def _validate_relations(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.rotary_dim % 2 != 0:
            raise ValueError(f"rotary dims: got {self.rotary_dim}, expected an even number (rotary halves)")
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
        if self.layer_types and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types: got {len(self.layer_types)} entries, expected {self.num_hidden_layers} (one per layer)"
            )
        if "sliding_attention" in self.layer_types and (self.sliding_window is None or self.sliding_window < 1):
            raise ValueError(f"sliding_window: got {self.sliding_window!r}, expected >= 1 for sliding layers")
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(self, name)
            ids = () if value is None else value if isinstance(value, tuple) else (value,)
            if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size for i in ids):
                raise ValueError(f"{name}: got {value}, expected None or ids in [0, {self.vocab_size})")
        limit = self.tokenizer_vocab_size
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= self.vocab_size
        ):
            raise ValueError(
                f"tokenizer_vocab_size: got {limit!r}, expected None or 1..vocab_size ({self.vocab_size}): a tokenizer "
                "with more ids than the embedding has rows cannot be used with this checkpoint"
            )

    @property
    def logit_vocab_size(self) -> int:
        """The columns of the logits: the tokenizer's ids (`tokenizer_vocab_size`), else every embedding row."""
        return self.tokenizer_vocab_size or self.vocab_size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """`eos_token_id` as a tuple (empty when unset)."""
        eos = self.eos_token_id
        return () if eos is None else eos if isinstance(eos, tuple) else (eos,)

    @property
    def traits(self) -> FamilyTraits:
        """What this family's forward computes (fixed per family)."""
        return _family(self.model_type).traits

    def is_moe_layer(self, layer_idx: int) -> bool:
        return _family(self.model_type).is_moe_layer(self, layer_idx)

    @property
    def moe_layer_ids(self) -> tuple[int, ...]:
        """Absolute decoder-layer indices of the MoE layers, in order (index = MoE ordinal)."""
        return tuple(i for i in range(self.num_hidden_layers) if self.is_moe_layer(i))

    @property
    def num_moe_layers(self) -> int:
        return len(self.moe_layer_ids)

    def is_sliding(self, layer_idx: int) -> bool:
        return bool(self.layer_types) and self.layer_types[layer_idx] == "sliding_attention"

    @property
    def is_mla(self) -> bool:
        return self.traits.attention == "mla"

    @property
    def rotary_dim(self) -> int:
        """Dims of each head the rotary embedding turns (MLA: only the rope part)."""
        return self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def key_dim(self) -> int:
        """Per-head key (and query) dim: MLA's nope + rope parts, else head_dim."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def value_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def cache_heads(self) -> int:
        """KV heads as attention reads them (MLA expands its latent to one key/value per query head)."""
        return self.num_attention_heads if self.is_mla else self.num_key_value_heads

    def replace(self, **changes: Any) -> MoEConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, *, vocab_size: int, model_type: str = "qwen3_moe", **overrides: Any) -> MoEConfig:
        """A size named in `PRESETS` for a family (`model_type`), with `overrides` on top."""
        if name not in PRESETS:
            raise ValueError(f"preset: got {name!r}, expected one of {sorted(PRESETS)}")
        if model_type not in FAMILY_NAMES:
            raise ValueError(f"model_type: got {model_type!r}, expected one of {list(FAMILY_NAMES)}")
        fields = {**PRESETS[name], **_family(model_type).preset_fields(PRESETS[name])}
        return cls(vocab_size=vocab_size, model_type=model_type, **{**fields, **overrides})

    def to_hf_dict(self) -> dict[str, Any]:
        """The `config.json` content that transformers' class of this family and vLLM read."""
        return _family(self.model_type).to_hf(self)

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any]) -> MoEConfig:
        """Reads a `config.json` of a supported family; raises if it asks for math this implementation lacks."""
        model_type = data.get("model_type")
        if model_type not in FAMILY_NAMES:
            raise ValueError(f"model_type: got {model_type!r}, expected one of {list(FAMILY_NAMES)}")
        return cls(**_family(model_type).from_hf(data))


_FAMILIES: dict[str, Any] = {}


def register_family(family: Any) -> None:
    """Makes `family` (a `moe_models.families.Family`) the one of its `name`. `moe_models.families` registers each
    family when it is imported, and the package imports it first, so every config finds its family; this module
    imports no family (the families import it)."""
    _FAMILIES[family.name] = family


def _family(model_type: str) -> Any:
    """The registered `moe_models.families.Family` of `model_type` (typed `Any`: this module does not import it)."""
    if model_type not in _FAMILIES:
        raise ValueError(f"model_type: got {model_type!r}, expected one of {list(_FAMILIES)}")
    return _FAMILIES[model_type]
