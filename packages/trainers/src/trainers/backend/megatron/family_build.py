"""FamilyBuild: how our model of one family becomes a Megatron-Core `GPTModel` on one expert-parallel rank, and how
its tensors move between our names (`moe_models`' state dict) and Megatron's.

Our names go to transformers' in-memory names first (`moe_models.families.family(...).to_hf_state`, the identity for
Qwen3-MoE; DeepSeek-V3 renames `mlp.shared_expert.` to `mlp.shared_experts.`), then to Megatron's layout
(`convert` for Qwen3-MoE, `deepseek_convert` for DeepSeek-V3); back the same way. Every step is a copy or a row
permutation, so the round trip is exact. `buffers`: also the persistent buffers (DeepSeek's router
`e_score_correction_bias`, Megatron's `expert_bias`); False converts parameters, or their AdamW moments, only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

import torch
from megatron.core.models.gpt.gpt_model import GPTModel
from moe_models import MoEConfig
from moe_models.families import family

from trainers.backend.megatron import convert, deepseek_convert
from trainers.backend.megatron.deepseek_gpt import build_deepseek_gpt
from trainers.backend.megatron.gpt import build_gpt, shape_of
from trainers.backend.megatron.support import FAMILIES

Tensors = Mapping[str, torch.Tensor]


class FamilyBuild(ABC):
    """One family's build on expert-parallel rank `ep_rank` of `ep_size` (experts `[rank * E / ep, (rank + 1) *
    E / ep)` live here; every other tensor is replicated)."""

    def __init__(self, config: MoEConfig, *, ep_size: int, ep_rank: int) -> None:
        self.config, self.ep_size, self.ep_rank = config, ep_size, ep_rank

    @abstractmethod
    def model(self, hf: Tensors) -> GPTModel:
        """A new GPTModel with this rank's share of `hf` (transformers' in-memory names, buffers included)."""

    @abstractmethod
    def hf_to_megatron(self, hf: Tensors, *, buffers: bool) -> dict[str, torch.Tensor]:
        """This rank's Megatron tensors from full HF-named ones."""

    @abstractmethod
    def megatron_to_hf(self, ranks: list[Tensors], *, buffers: bool) -> dict[str, torch.Tensor]:
        """Full HF-named tensors from every expert-parallel rank's Megatron ones (rank order)."""

    def to_megatron(self, ours: Tensors, *, buffers: bool) -> dict[str, torch.Tensor]:
        """This rank's Megatron tensors from our full ones."""
        hf = family(self.config.model_type).to_hf_state(dict(ours), self.config)
        return self.hf_to_megatron(hf, buffers=buffers)

    def to_ours(self, ranks: list[Tensors], *, buffers: bool) -> dict[str, torch.Tensor]:
        """Our full tensors from every expert-parallel rank's Megatron ones."""
        hf = self.megatron_to_hf(ranks, buffers=buffers)
        return family(self.config.model_type).from_hf_state(hf, self.config)


class Qwen3MoeBuild(FamilyBuild):
    """`gpt.build_gpt` and `convert` (no buffers to convert)."""

    def model(self, hf: Tensors) -> GPTModel:
        return build_gpt(self.config, hf, ep_size=self.ep_size, ep_rank=self.ep_rank)

    @property
    def shape(self) -> convert.Shape:
        return shape_of(self.config, ep_size=self.ep_size, ep_rank=self.ep_rank)

    def hf_to_megatron(self, hf: Tensors, *, buffers: bool) -> dict[str, torch.Tensor]:
        return convert.hf_to_megatron(hf, self.shape)

    def megatron_to_hf(self, ranks: list[Tensors], *, buffers: bool) -> dict[str, torch.Tensor]:
        return convert.megatron_to_hf(ranks, self.shape)


class DeepseekV3Build(FamilyBuild):
    """`deepseek_gpt.build_deepseek_gpt` from our config's `config.json` dict (what transformers would read for our
    model) and `deepseek_convert`."""

    def model(self, hf: Tensors) -> GPTModel:
        return build_deepseek_gpt(self.config.to_hf_dict(), hf, ep_size=self.ep_size, ep_rank=self.ep_rank)

    @property
    def shape(self) -> deepseek_convert.MlaShape:
        cfg = self.config.to_hf_dict()
        return deepseek_convert.MlaShape.from_hf_config(cfg, ep_size=self.ep_size, ep_rank=self.ep_rank)

    def hf_to_megatron(self, hf: Tensors, *, buffers: bool) -> dict[str, torch.Tensor]:
        return deepseek_convert.hf_to_megatron(hf, self.shape, buffers=buffers)

    def megatron_to_hf(self, ranks: list[Tensors], *, buffers: bool) -> dict[str, torch.Tensor]:
        return deepseek_convert.megatron_to_hf(ranks, self.shape, buffers=buffers)


BUILDS: dict[str, type[FamilyBuild]] = {"qwen3_moe": Qwen3MoeBuild, "deepseek_v3": DeepseekV3Build}
if tuple(BUILDS) != FAMILIES:
    raise ImportError(f"megatron support.FAMILIES: got {FAMILIES}, expected the built families {tuple(BUILDS)}")


def family_build(config: MoEConfig, *, ep_size: int, ep_rank: int) -> FamilyBuild:
    """The build of `config.model_type`; raises ValueError naming the families Megatron builds."""
    if config.model_type not in BUILDS:
        raise ValueError(
            f"backend.kind megatron: expected a model of {list(BUILDS)}, got model_type {config.model_type!r}"
        )
    return BUILDS[config.model_type](config, ep_size=ep_size, ep_rank=ep_rank)
