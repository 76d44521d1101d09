"""OptimisedModule: a torch module and its AdamW optimiser, the part of a training backend that does not depend on
what the module computes: the learning-rate schedule, the global grad-norm clip, the weight version, and a
checkpoint (`BackendState`) that continues bit for bit (weights, moments, per-parameter step counts, torch RNG).

`TorchBackend` (causal LMs) and `FlowBackend` (flow-matching image models) are OptimisedModules with their own
forward calls.
"""

from __future__ import annotations

import torch

from trainers.backend.optim_config import OptimConfig
from trainers.backend.state import BackendState

RNG_KEY = "rng.torch"


FUSED_FROM = 10_000_000  # parameters from which `optim.kernel auto` takes AdamW's fused kernel (tiny: foreach)


class OptimisedModule:
    """`total_steps`: the run's optimiser steps (a cosine schedule's horizon; None only with a constant one).
    `shares_prompts`: whether its forward computes a prompt that rows share once (`TrainingBackend`)."""

    shares_prompts: bool = False

    def __init__(
        self, model: torch.nn.Module, optim: OptimConfig | None, *, version: int = 0, total_steps: int | None = None
    ) -> None:
        optim = optim or OptimConfig()
        optim.lr_at(0, total_steps)  # a cosine schedule without its horizon fails here, not at the first step
        self.total_steps = total_steps
        self.model = model
        self.optim = optim
        self.grad_clip = optim.grad_clip
        self._version = version
        self._param_names = [name for name, _ in model.named_parameters()]

    def build_optimizer(self) -> None:
        """Creates AdamW over the module's parameters as they are now (after any sharding), with the kernel
        `optim.kernel` names (`auto`: fused from `FUSED_FROM` parameters on, unless they are sharded DTensors)."""
        params = list(self.model.parameters())
        fused = self.optim.kernel == "fused"
        if self.optim.kernel == "auto":
            sharded = any(type(p).__name__ == "DTensor" for p in params)
            fused = not sharded and sum(p.numel() for p in {id(p): p for p in params}.values()) >= FUSED_FROM
        self.optimizer = torch.optim.AdamW(
            params,
            lr=self.optim.lr_at(0, self.total_steps),
            betas=(self.optim.beta1, self.optim.beta2),
            weight_decay=self.optim.weight_decay,
            fused=fused or None,
        )

    @property
    def version(self) -> int:
        return self._version

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _steps_taken(self) -> int:
        """Optimiser steps so far (AdamW's own per-parameter counts, which checkpoints carry: a resume goes on)."""
        return max((int(s["step"]) for s in self.optimizer.state.values() if "step" in s), default=0)

    def optimizer_step(self) -> torch.Tensor:
        """Clips the global grad norm, sets this step's learning rate, steps; returns the norm before clipping."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        lr = self.optim.lr_at(self._steps_taken(), self.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        return grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def advance_version(self) -> None:
        self._version += 1

    def state_dict(self) -> BackendState:
        tensors = {f"model.{k}": v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        opt = self.optimizer.state_dict()
        for index, entry in opt["state"].items():
            for key, value in entry.items():
                tensors[f"optim.{index}.{key}"] = torch.as_tensor(value).detach().to("cpu", copy=True)
        tensors[RNG_KEY] = torch.get_rng_state()
        groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()} for g in opt["param_groups"]]
        return BackendState(tensors, self._version, groups, list(self._param_names))

    def load_state_dict(self, state: BackendState) -> None:
        if state.optimizer_param_names != self._param_names:
            raise ValueError(
                f"load_state_dict: expected optimiser parameters {self._param_names[:3]}..., got "
                f"{state.optimizer_param_names[:3]}... ({len(state.optimizer_param_names)} names)"
            )
        model_state = {k[len("model.") :]: v for k, v in state.tensors.items() if k.startswith("model.")}
        self.model.load_state_dict(model_state, strict=True)
        per_param: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in state.tensors.items():
            if key.startswith("optim."):
                _, index, name = key.split(".", 2)
                per_param.setdefault(int(index), {})[name] = value
        groups = [{k: tuple(v) if k == "betas" else v for k, v in g.items()} for g in state.optimizer_groups]
        self.optimizer.load_state_dict({"state": per_param, "param_groups": groups})
        if RNG_KEY not in state.tensors:
            raise ValueError(f"load_state_dict: expected the tensor {RNG_KEY!r} in the state, got none")
        torch.set_rng_state(state.tensors[RNG_KEY])
        self._version = state.version
