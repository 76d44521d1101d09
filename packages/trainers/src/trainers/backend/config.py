"""The `optim` and `backend` sections (`backend.kind` torch | veomni | megatron). Standard library only (`--help`
imports it); `build()` and `build_rank()` import torch. Where each kind runs its steps is
`trainers.step_runner.build_steps`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from trainers.backend.megatron.support import FAMILIES as MEGATRON_FAMILIES

if TYPE_CHECKING:
    import torch
    from moe_models import MoEForCausalLM

    from trainers.backend.data_parallel import DataParallel
    from trainers.backend.protocol import TrainingBackend


def _help(text: str, default: object) -> object:
    return field(default=default, metadata={"help": text})


@dataclass
class OptimConfig:
    """AdamW with a global grad-norm clip and an optional linear learning-rate ramp; every backend builds its own
    optimiser from this (and sets `lr_at(n)` before its optimiser step n)."""

    lr: float = _help("AdamW learning rate (after the ramp)", 1e-4)
    lr_warmup_steps: int = _help(
        "optimiser steps of a linear ramp to lr (step n, from 0, uses lr * (n + 1) / lr_warmup_steps); 0: no ramp", 0
    )
    schedule: Literal["constant", "cosine"] = _help(
        "after the ramp: constant, or a cosine decay to min_lr_ratio x lr at the run's last optimiser step "
        "(run.steps x train.mini_batches_per_step x train.ppo_epochs)",
        "constant",
    )
    min_lr_ratio: float = _help("cosine: the learning rate at the last step, as a fraction of lr", 0.0)
    beta1: float = _help("AdamW beta1", 0.9)
    beta2: float = _help("AdamW beta2", 0.999)
    weight_decay: float = _help("AdamW decoupled weight decay", 0.0)
    grad_clip: float = _help("max global grad norm (L2) per optimiser step", 1.0)
    kernel: Literal["auto", "foreach", "fused"] = _help(
        "AdamW's kernel: fused (one kernel a tensor: ~10x faster on a 315M-parameter model on a CPU) or foreach "
        "(the two round differently); auto: fused from 10M parameters on (unless they are sharded), foreach below",
        "auto",
    )

    def __post_init__(self) -> None:
        if not self.lr > 0 or not self.grad_clip > 0:
            raise ValueError(f"optim: expected lr > 0 and grad_clip > 0, got {self.lr}, {self.grad_clip}")
        if self.kernel not in ("auto", "foreach", "fused"):
            raise ValueError(f"optim.kernel: expected auto, foreach or fused, got {self.kernel!r}")
        ramp = self.lr_warmup_steps
        if isinstance(ramp, bool) or not isinstance(ramp, int) or ramp < 0:
            raise ValueError(f"optim.lr_warmup_steps: expected an int >= 0, got {self.lr_warmup_steps!r}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"optim.min_lr_ratio: expected a fraction in [0, 1], got {self.min_lr_ratio}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1) or self.weight_decay < 0:
            raise ValueError(
                f"optim: expected beta1, beta2 in [0, 1) and weight_decay >= 0, got {self.beta1}, {self.beta2}, "
                f"{self.weight_decay}"
            )

    def lr_at(self, step: int, total_steps: int | None = None) -> float:
        """The learning rate of optimiser step `step` (0-based, counted over the whole run, resumes included);
        `total_steps`, the run's optimiser steps, is needed by the cosine schedule (steps past it keep its end)."""
        if step < 0:
            raise ValueError(f"OptimConfig.lr_at: expected a step >= 0, got {step}")
        if self.lr_warmup_steps and step < self.lr_warmup_steps:
            return self.lr * (step + 1) / self.lr_warmup_steps
        if self.schedule == "constant":
            return self.lr
        if total_steps is None or total_steps < 1:
            raise ValueError(f"optim.schedule cosine: expected the run's optimiser steps (>= 1), got {total_steps}")
        span = max(1, total_steps - 1 - self.lr_warmup_steps)
        done = min(1.0, (step - self.lr_warmup_steps) / span)
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * done)))


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

    device: Literal["auto", "cpu", "cuda"] = _help("where the policy trains (auto: cuda when available)", "auto")
    compute_dtype: Literal["float32", "bfloat16"] = _help(
        "dtype of the forward and backward (bfloat16: torch autocast; the weights and AdamW stay fp32, log-probs are "
        "taken in fp32)",
        "float32",
    )
    experts_kernel: Literal["auto", "grouped", "padded", "looped"] = _help(
        "the routed experts' path under autograd: grouped (grouped matmuls over expert-sorted tokens, with their "
        "backward; CPU, float32), padded (batched matmuls over a zero-padded buffer) or looped (a matmul pair per "
        "expert, any device); auto: grouped on the CPU, looped elsewhere. They agree to float rounding",
        "auto",
    )
    share_prompts: bool = _help(
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
    ranks: int = _help(RANKS_HELP, 2)
    families: ClassVar[tuple[str, ...]] = ("qwen3_moe",)  # the families VeOmni's models and our mapping cover
    device: Literal["cpu", "cuda"] = _help("cpu: gloo; cuda: nccl, one GPU per rank", "cpu")
    compute_dtype: Literal["float32", "bfloat16"] = _help(
        "dtype of the forward and backward (bfloat16: torch autocast; weights and AdamW stay fp32)", "float32"
    )
    torch_threads: int = _help("torch intra-op threads per rank", 1)

    def __post_init__(self) -> None:
        _positive_ints(self, "ranks", "torch_threads")

    def unsupported_family(self, family: str) -> str:
        return veomni_family_refusal(family)

    def unsupported_checkpoint(self, checkpoint_dir: str) -> str:
        """The family refusal, for the model_type of the checkpoint's config.json."""
        return _family_refusal("veomni", _model_type(checkpoint_dir), self.families)

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
    ranks: int = _help(RANKS_HELP, 2)
    families: ClassVar[tuple[str, ...]] = MEGATRON_FAMILIES  # the families our GPTModel builds and mappings cover
    expert_parallel: int = _help(
        "ranks the experts are split over (must divide ranks and the expert count; 1: every rank holds all)", 2
    )
    device: Literal["cpu", "cuda"] = _help("cpu: gloo; cuda: nccl, one GPU per rank", "cpu")
    torch_threads: int = _help("torch intra-op threads per rank", 1)

    def __post_init__(self) -> None:
        _positive_ints(self, "ranks", "expert_parallel", "torch_threads")
        if self.ranks % self.expert_parallel:
            raise ValueError(
                f"backend.expert_parallel: expected a divisor of backend.ranks ({self.ranks}), got "
                f"{self.expert_parallel}"
            )

    def unsupported_family(self, family: str) -> str:
        return _family_refusal("megatron", family, self.families)

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


def _no_replay_hook(name: str, family: str) -> str:
    return (
        f"VeOmni 0.1.12's {name} MoE block never calls its router-replay hook "
        f"(veomni.utils.moe_router_replay.maybe_replay_indices; {family!r} is not in its SUPPORTED_MOE_MODEL_TYPES), "
        "so router replay cannot reach its routers"
    )


# Why VeOmni 0.1.12 cannot train each moe_models family but Qwen3-MoE (docs/veomni.md, "Model families"; the
# `veomni`-marked tests/trainers/test_trainers_veomni_families.py pins each reason against VeOmni itself).
VEOMNI_UNSERVED: dict[str, str] = {
    "qwen2_moe": "VeOmni 0.1.12 has no Qwen2-MoE model (no 'qwen2_moe' in its model registry)",
    "mixtral": "VeOmni 0.1.12 has no Mixtral model (no 'mixtral' in its model registry)",
    "deepseek_v3": _no_replay_hook("DeepSeek-V3", "deepseek_v3"),
    "gpt_oss": _no_replay_hook("GPT-OSS", "gpt_oss"),
}


def veomni_family_refusal(family: str) -> str:
    """Why the VeOmni backend cannot train a model of `family` (a Hugging Face model_type), or "" when it can."""
    return _family_refusal("veomni", family, VeOmniBackendConfig.families, VEOMNI_UNSERVED.get(family, ""))


def _family_refusal(kind: str, family: str, served: tuple[str, ...], reason: str = "") -> str:
    if family in served:
        return ""
    because = f": {reason}" if reason else ""
    return f"backend.kind {kind} builds and maps {list(served)} models only, got a {family} model{because}"


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
    """A backend whose ranks are processes of their own (`trainers.backend.rank_group.RankGroup`): the driver calls
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
