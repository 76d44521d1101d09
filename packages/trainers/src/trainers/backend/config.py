"""The `optim` and `backend` sections. Standard library only (`--help` imports it); `build()` imports torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from moe_models import MoEForCausalLM

    from trainers.backend.data_parallel import DataParallel
    from trainers.backend.protocol import TrainingBackend


def _help(text: str, default: object) -> object:
    return field(default=default, metadata={"help": text})


@dataclass
class OptimConfig:
    """AdamW with a global grad-norm clip; every backend builds its own optimiser from this."""

    lr: float = _help("AdamW learning rate", 1e-4)
    beta1: float = _help("AdamW beta1", 0.9)
    beta2: float = _help("AdamW beta2", 0.999)
    weight_decay: float = _help("AdamW decoupled weight decay", 0.0)
    grad_clip: float = _help("max global grad norm (L2) per optimiser step", 1.0)

    def __post_init__(self) -> None:
        if not self.lr > 0 or not self.grad_clip > 0:
            raise ValueError(f"optim: expected lr > 0 and grad_clip > 0, got {self.lr}, {self.grad_clip}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1) or self.weight_decay < 0:
            raise ValueError(
                f"optim: expected beta1, beta2 in [0, 1) and weight_decay >= 0, got {self.beta1}, {self.beta2}, "
                f"{self.weight_decay}"
            )


@dataclass
class TorchBackendConfig:
    """Plain torch in this process (or FSDP2 over an initialised torch.distributed group)."""

    kind: Literal["torch"] = "torch"
    device: Literal["auto", "cpu", "cuda"] = _help("where the policy trains (auto: cuda when available)", "auto")

    def build(
        self, model: MoEForCausalLM, optim: OptimConfig, *, temperature: float,
        reference: MoEForCausalLM | None = None, data_parallel: DataParallel | None = None,
    ) -> TrainingBackend:  # fmt: skip
        from trainers.backend.torch_backend import TorchBackend

        return TorchBackend(model, optim, temperature=temperature, device=self.device, reference=reference,
                            data_parallel=data_parallel)  # fmt: skip


BackendConfig = TorchBackendConfig
