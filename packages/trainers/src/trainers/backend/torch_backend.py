"""TorchBackend: a MoE causal LM and its AdamW optimiser in plain torch, with router replay (R3); in one process or
data parallel over torch.distributed with FSDP2 (`trainers.backend.data_parallel`). Compute only: what a step
does is `trainers.step`'s.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from moe_models import MoEForCausalLM, RouterReplay

from trainers.algorithm.loss_io import LossOutputs
from trainers.backend.config import OptimConfig
from trainers.backend.data_parallel import DataParallel, full_state, shard_model
from trainers.backend.protocol import LossFn, PolicyRole
from trainers.backend.state import BackendState
from trainers.batch import TrainBatch

RNG_KEY = "rng.torch"


def resolve_device(name: str) -> torch.device:
    """`auto`: cuda when available, else cpu; `cuda` without a GPU is an error naming the fix."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("backend.device: got cuda, but torch sees no CUDA device; expected cpu or auto here")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"backend.device: expected auto, cpu or cuda, got {name!r}")
    return torch.device(name)


class TorchBackend:
    """Implements `trainers.backend.TrainingBackend`. `reference`: a frozen copy of the base policy (for a KL term),
    kept on the same device, never trained."""

    def __init__(self, model: MoEForCausalLM, optim: OptimConfig | None = None, *, temperature: float = 1.0,
                 device: str = "auto", reference: MoEForCausalLM | None = None, version: int = 0,
                 data_parallel: DataParallel | None = None, total_steps: int | None = None) -> None:  # fmt: skip
        if not temperature > 0:
            raise ValueError(f"TorchBackend: expected temperature > 0, got {temperature}")
        optim = optim or OptimConfig()
        optim.lr_at(0, total_steps)  # a cosine schedule without its horizon fails here, not at the first step
        self.total_steps = total_steps
        self._device = resolve_device(device)
        self.model = model.to(self._device).train()
        self.temperature = temperature
        self._version = version
        self._param_names = [name for name, _ in model.named_parameters()]
        self.dp = data_parallel
        self.reference = None
        if reference is not None:
            self.reference = reference.to(self._device).eval().requires_grad_(False)
        if data_parallel is not None:
            shard_model(model)  # before the optimiser: it must hold the sharded parameters
        self.grad_clip = optim.grad_clip
        self.optim = optim
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=optim.lr_at(0, total_steps), betas=(optim.beta1, optim.beta2),
            weight_decay=optim.weight_decay,
        )  # fmt: skip

    @classmethod
    def with_reference(cls, model: MoEForCausalLM, optim: OptimConfig | None = None, **kwargs: object) -> TorchBackend:
        """A backend whose reference policy is a frozen copy of `model`'s current weights."""
        return cls(model, optim, reference=copy.deepcopy(model), **kwargs)  # type: ignore[arg-type]

    @property
    def version(self) -> int:
        return self._version

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def data_parallel(self) -> DataParallel | None:
        return self.dp

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # ------------------------------------------------------------------ forward
    def _forward(self, model: MoEForCausalLM, micro: TrainBatch, replay: bool,
                 top_k: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
        """([b, t-1] log-probs, [b, t-1, K] log-probs of the teacher's top-k ids when `top_k` and the batch has
        them, else None)."""
        micro = micro.to(self._device)
        routing = None
        if replay:
            if micro.replay_ids is None or micro.replay_mask is None:
                raise ValueError("router replay: expected a batch with routing (replay_ids), got none (dense model?)")
            routing = RouterReplay(micro.replay_ids, micro.replay_mask)
        at_ids = micro.teacher_top_ids if top_k else None
        log_probs, at, _ = model.token_log_probs_at(micro.input_ids, micro.attention_mask, at_ids,
                                                    temperature=self.temperature, replay=routing)  # fmt: skip
        return log_probs, at

    @torch.no_grad()
    def log_probs(
        self, micro_batches: Sequence[TrainBatch], *, replay: bool, role: PolicyRole = "policy"
    ) -> list[torch.Tensor]:
        model = self.model
        if role == "reference":
            if self.reference is None:
                raise ValueError("log_probs(role='reference'): expected a backend built with a reference, got none")
            model = self.reference
        return [self._forward(model, micro, replay)[0] for micro in micro_batches]

    def forward_backward(self, micro: TrainBatch, loss_fn: LossFn, *, replay: bool) -> LossOutputs:
        out = loss_fn(*self._forward(self.model, micro, replay, top_k=True))
        world = 1 if self.dp is None else self.dp.world_size
        (out.loss * world).backward()  # FSDP2 averages gradients over ranks; the loss has global denominators
        return LossOutputs(out.loss.detach(), out.means, out.sums, out.maxima)

    def _steps_taken(self) -> int:
        """Optimiser steps so far (AdamW's own per-parameter counts, which checkpoints carry: a resume goes on)."""
        return max((int(s["step"]) for s in self.optimizer.state.values() if "step" in s), default=0)

    def optimizer_step(self) -> torch.Tensor:
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

    # ------------------------------------------------------------------ weights and checkpoints
    def export_weights(self) -> tuple[dict[str, torch.Tensor], int]:
        """Full weights on every rank (all-gathered under data parallelism), CPU tensors in their own dtype; the
        tied lm_head alias is omitted, as checkpoints do."""
        if self.dp is not None:
            return full_state(self.model), self._version
        state = self.model.state_dict()
        if self.model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}, self._version

    def _single_process(self, what: str) -> None:
        if self.dp is not None:
            raise ValueError(
                f"TorchBackend.{what}: implemented for one process only; a data-parallel checkpoint needs "
                "torch.distributed.checkpoint (sharded optimiser state), which this backend does not write yet"
            )

    def state_dict(self) -> BackendState:
        self._single_process("state_dict")
        tensors = {f"model.{k}": v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        opt = self.optimizer.state_dict()
        for index, entry in opt["state"].items():
            for key, value in entry.items():
                tensors[f"optim.{index}.{key}"] = torch.as_tensor(value).detach().to("cpu", copy=True)
        tensors[RNG_KEY] = torch.get_rng_state()
        groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()} for g in opt["param_groups"]]
        return BackendState(tensors, self._version, groups, list(self._param_names))

    def load_state_dict(self, state: BackendState) -> None:
        self._single_process("load_state_dict")
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
