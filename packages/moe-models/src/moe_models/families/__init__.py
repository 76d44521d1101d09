"""The supported MoE families, each in one module: `family(model_type)` returns its `Family`."""

from __future__ import annotations

from moe_models.config import FAMILY_NAMES, register_family
from moe_models.families.deepseek_v3 import DeepseekV3
from moe_models.families.family import Family, FamilyTraits
from moe_models.families.gpt_oss import GptOss
from moe_models.families.mixtral import Mixtral
from moe_models.families.qwen2_moe import Qwen2Moe
from moe_models.families.qwen3_moe import Qwen3Moe

_FAMILIES: dict[str, Family] = {f.name: f for f in (Qwen3Moe(), Qwen2Moe(), Mixtral(), DeepseekV3(), GptOss())}
if tuple(_FAMILIES) != FAMILY_NAMES:
    raise ImportError(f"moe_models.config.FAMILY_NAMES: got {FAMILY_NAMES}, expected {tuple(_FAMILIES)}")
for _family in _FAMILIES.values():
    register_family(_family)


def family(model_type: str) -> Family:
    """The family of a Hugging Face `model_type`; raises ValueError naming the supported ones."""
    if model_type not in _FAMILIES:
        raise ValueError(f"model_type: got {model_type!r}, expected one of {list(_FAMILIES)}")
    return _FAMILIES[model_type]


__all__ = ["Family", "FamilyTraits", "family"]
