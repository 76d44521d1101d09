"""The `backend` section (`backend.kind` torch | veomni | megatron; the `optim` section is
`trainers.backend.optim_config`). Standard library only (`--help`
imports it); `build()` and `build_rank()` import torch. Where each kind runs its steps is
`trainers.step_runner.build_steps`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from run_lifecycle.fields import help_field

from trainers.backend.families import family_refusal
from trainers.backend.megatron.support import FAMILIES as MEGATRON_FAMILIES
from trainers.backend.optim_config import OptimConfig
from trainers.backend.veomni.support import VEOMNI_FAMILIES, veomni_family_refusal

if TYPE_CHECKING:
    import torch
    from moe_models import MoEForCausalLM

    from trainers.backend.data_parallel import DataParallel
    from trainers.backend.protocol import TrainingBackend


@dataclass
class TorchBackendConfig:
    """Plain torch in this process (or FSDP2 over an initialised torch.distributed group)."""

    kind: Literal["torch"] = "torch"

    def unsupported_family(self, family: str) -> str:
        """Why this backend cannot train a model of `family` (a Hugging Face model_type), or "": it trains every
        family moe_models defines."""
        return ""

    def unsupported_checkpoint(self, checkpoint_dir: str) -> str:
        """Why this backend cannot train the checkpoint in `checkpoint_dir` (read without torch), or "": it trains
        whatever our loader loads."""
        return ""

    device: Literal["auto", "cpu", "cuda"] = help_field("where the policy trains (auto: cuda when available)", "auto")
    compute_dtype: Literal["float32", "bfloat16"] = help_field(
        "dtype of the forward and backward (bfloat16: torch autocast; the weights and AdamW stay fp32, log-probs are "
        "taken in fp32)",
        "float32",
    )
    experts_kernel: Literal["auto", "grouped", "padded", "looped"] = help_field(
        "the routed experts' path under autograd: grouped (grouped matmuls over expert-sorted tokens, with their "
        "backward; CPU, float32), padded (batched matmuls over a zero-padded buffer) or looped (a matmul pair per "
        "expert, any device); auto: grouped on the CPU, looped elsewhere. They agree to float rounding",
        "auto",
    )
    share_prompts: bool = help_field(
        "compute a prompt once per micro-batch for the samples that share it (same tokens and replayed routing: a "
        "GRPO group's), the others reading its keys and values; exact up to float rounding",
        True,
    )

    def build(
        self,
        model: MoEForCausalLM,
        optim: OptimConfig,
        *,
        temperature: float,
        reference: MoEForCausalLM | None = None,
        data_parallel: DataParallel | None = None,
        total_steps: int | None = None,
        true_on_policy: bool = False,
    ) -> TrainingBackend:
        """`total_steps`: the run's optimiser steps (the cosine schedule's horizon); `true_on_policy`: the forward
        is the engine's invariant one (`numerics.true_on_policy`)."""
        from trainers.backend.torch_backend import TorchBackend

        return TorchBackend(
            model,
            optim,
            temperature=temperature,
            device=self.device,
            reference=reference,
            data_parallel=data_parallel,
            total_steps=total_steps,
            compute_dtype=self.compute_dtype,
            true_on_policy=true_on_policy,
            experts_kernel=self.experts_kernel,
            share_prompts=self.share_prompts,
        )


RANKS_HELP = (
    "training processes, one rank each, every rank training on its share of each mini-batch's rows (veomni: FSDP2 "
    "shards, 1 = unsharded; megatron: the experts split over backend.expert_parallel of them)"
)


@dataclass
class VeOmniBackendConfig:
    """VeOmni's Qwen3-MoE (its generated modeling, eager ops) sharded with its FSDP2 over `ranks` processes of their
    own (gloo on CPU, nccl on GPU); router replay through VeOmni's replay hook. Needs the `veomni` dependency group
    (`bash scripts/test_veomni.sh` builds `.veomni-env`); the default install does not have it. Why every other
    family is refused: `VEOMNI_UNSERVED`."""

    kind: Literal["veomni"] = "veomni"
    ranks: int = help_field(RANKS_HELP, 2)
    families: ClassVar[tuple[str, ...]] = VEOMNI_FAMILIES  # the families VeOmni's models and our mapping cover
    device: Literal["cpu", "cuda"] = help_field("cpu: gloo; cuda: nccl, one GPU per rank", "cpu")
    compute_dtype: Literal["float32", "bfloat16"] = help_field(
        "dtype of the forward and backward (bfloat16: torch autocast; weights and AdamW stay fp32)", "float32"
    )
    torch_threads: int = help_field("torch intra-op threads per rank", 1)

    def __post_init__(self) -> None:
        _positive_ints(self, "ranks", "torch_threads")

    def unsupported_family(self, family: str) -> str:
        return veomni_family_refusal(family)

    def unsupported_checkpoint(self, checkpoint_dir: str) -> str:
        """The family refusal, for the model_type of the checkpoint's config.json."""
        return family_refusal("veomni", _model_type(checkpoint_dir), self.families)

    def check_installed(self) -> None:
        from trainers.backend.veomni.install import check_installed

        check_installed()

    def build_rank(
        self,
        checkpoint_dir: str,
        optim: OptimConfig,
        *,
        temperature: float,
        total_steps: int,
        seed: int,
        data_parallel: DataParallel | None,
        device: torch.device,
        reference: bool,
        vocab_size: int | None = None,
    ) -> TrainingBackend:
        from trainers.backend.veomni.backend import VeOmniBackend

        return VeOmniBackend(
            checkpoint_dir,
            optim,
            temperature=temperature,
            vocab_size=vocab_size,
            data_parallel=data_parallel,
            reference=reference,
            total_steps=total_steps,
            compute_dtype=self.compute_dtype,
            device=str(device),
        )


@dataclass
class MegatronBackendConfig:
    """Megatron-Core's `GPTModel` (local layer spec, plain torch modules) over `ranks` processes of their own (gloo
    on CPU, nccl on GPU): experts split over `expert_parallel` ranks (tokens dispatched by all-gather), every other
    weight replicated and its gradients summed over the ranks; router replay through Megatron's `RouterReplay` hook.
    fp32 only. Needs the `megatron` dependency group on Python >= 3.12 (`bash scripts/test_megatron.sh` builds
    `.megatron-env`); the default install does not have it."""

    kind: Literal["megatron"] = "megatron"
    ranks: int = help_field(RANKS_HELP, 2)
    families: ClassVar[tuple[str, ...]] = MEGATRON_FAMILIES  # the families our GPTModel builds and mappings cover
    expert_parallel: int = help_field(
        "ranks the experts are split over (must divide ranks and the expert count; 1: every rank holds all)", 2
    )
    device: Literal["cpu", "cuda"] = help_field("cpu: gloo; cuda: nccl, one GPU per rank", "cpu")
    torch_threads: int = help_field("torch intra-op threads per rank", 1)

    def __post_init__(self) -> None:
        _positive_ints(self, "ranks", "expert_parallel", "torch_threads")
        if self.ranks % self.expert_parallel:
            raise ValueError(
                f"backend.expert_parallel: expected a divisor of backend.ranks ({self.ranks}), got "
                f"{self.expert_parallel}"
            )

    def unsupported_family(self, family: str) -> str:
        return family_refusal("megatron", family, self.families)

    def unsupported_checkpoint(self, checkpoint_dir: str) -> str:
        """Why the Megatron build refuses the checkpoint's config.json (its family, or a setting transformers and
        Megatron-Core compute differently: `trainers.backend.megatron.support`), or ""."""
        from trainers.backend.megatron.support import unsupported_checkpoint

        return unsupported_checkpoint(checkpoint_dir)

    def check_installed(self) -> None:
        from trainers.backend.megatron.install import check_installed

        check_installed()

    def build_rank(
        self,
        checkpoint_dir: str,
        optim: OptimConfig,
        *,
        temperature: float,
        total_steps: int,
        seed: int,
        data_parallel: DataParallel | None,
        device: torch.device,
        reference: bool,
        vocab_size: int | None = None,
    ) -> TrainingBackend:
        from trainers.backend.megatron.backend import MegatronBackend

        return MegatronBackend(
            checkpoint_dir,
            optim,
            temperature=temperature,
            vocab_size=vocab_size,
            data_parallel=data_parallel,
            expert_parallel=self.expert_parallel,
            reference=reference,
            total_steps=total_steps,
            device=device,
            seed=seed,
        )


def _model_type(checkpoint_dir: str) -> str:
    config_file = Path(checkpoint_dir) / "config.json"
    if not config_file.is_file():
        raise ValueError(f"backend: expected a checkpoint directory with config.json, got {checkpoint_dir}")
    return str(json.loads(config_file.read_text()).get("model_type"))


def _positive_ints(cfg: object, *names: str) -> None:
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"backend.{name}: expected an int >= 1, got {value!r}")


class RankedBackendConfig(Protocol):
    """A backend whose ranks are processes of their own (`trainers.rank_group.RankGroup`): the driver calls
    `check_installed()` and `unsupported_checkpoint(checkpoint_dir)` (a refusal's reason, or "") before it spawns
    them, each rank calls `build_rank` after joining the process group (with the run's `StepSpec` fields;
    `reference`: the algorithm needs a frozen copy of the base weights)."""

    kind: str
    ranks: int
    device: str
    torch_threads: int

    def check_installed(self) -> None: ...

    def unsupported_checkpoint(self, checkpoint_dir: str) -> str: ...

    def build_rank(
        self,
        checkpoint_dir: str,
        optim: OptimConfig,
        *,
        temperature: float,
        total_steps: int,
        seed: int,
        data_parallel: DataParallel | None,
        device: torch.device,
        reference: bool,
        vocab_size: int | None = None,
    ) -> TrainingBackend: ...


BackendConfig = TorchBackendConfig | VeOmniBackendConfig | MegatronBackendConfig
