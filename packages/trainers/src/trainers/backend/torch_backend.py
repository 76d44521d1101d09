"""TorchBackend: a MoE causal LM and its AdamW optimiser in plain torch, with router replay (R3); in one process or
data parallel over torch.distributed with FSDP2 (`trainers.backend.data_parallel`). Compute only: what a step
does is `trainers.step`'s.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from moe_models import MoEForCausalLM, RouterReplay, TokenScores, set_experts_kernel

from trainers.aggregation import masked_mean
from trainers.algorithm.loss_io import LossOutputs
from trainers.backend.data_parallel import DataParallel, full_state, shard_model
from trainers.backend.optim_config import OptimConfig
from trainers.backend.optimised_module import OptimisedModule
from trainers.backend.protocol import LossFn, PolicyRole
from trainers.backend.state import BackendState
from trainers.batch import TrainBatch


def resolve_device(name: str) -> torch.device:
    """`auto`: cuda when available, else cpu; `cuda` without a GPU is an error naming the fix."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("backend.device: got cuda, but torch sees no CUDA device; expected cpu or auto here")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"backend.device: expected auto, cpu or cuda, got {name!r}")
    return torch.device(name)


class TorchBackend(OptimisedModule):
    """Implements `trainers.backend.TrainingBackend`. `reference`: a frozen copy of the base policy (for a KL term),
    kept on the same device, never trained."""

    def __init__(
        self,
        model: MoEForCausalLM,
        optim: OptimConfig | None = None,
        *,
        temperature: float = 1.0,
        device: str = "auto",
        reference: MoEForCausalLM | None = None,
        version: int = 0,
        data_parallel: DataParallel | None = None,
        total_steps: int | None = None,
        compute_dtype: str = "float32",
        true_on_policy: bool = False,
        experts_kernel: str = "auto",
        share_prompts: bool = True,
    ) -> None:
        if not temperature > 0:
            raise ValueError(f"TorchBackend: expected temperature > 0, got {temperature}")
        self._device = resolve_device(device)
        super().__init__(model.to(self._device).train(), optim, version=version, total_steps=total_steps)
        self.temperature = temperature
        if experts_kernel == "auto":  # grouped_mm has a CPU backward; on CUDA it serves bf16 only
            experts_kernel = "grouped" if self._device.type == "cpu" else "looped"
        set_experts_kernel(model, experts_kernel)  # the reference runs without autograd: grouped_mm on CPU
        if compute_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"TorchBackend.compute_dtype: expected float32 or bfloat16, got {compute_dtype!r}")
        self.compute_dtype = compute_dtype
        if true_on_policy and (compute_dtype != "float32" or data_parallel is not None):
            raise ValueError(
                "TorchBackend.true_on_policy: expected fp32 compute in one process, got "
                f"{compute_dtype} {'with' if data_parallel else 'without'} data parallelism"
            )
        self.true_on_policy = true_on_policy
        self.shares_prompts = share_prompts
        self.dp = data_parallel
        self.reference = None
        if reference is not None:
            self.reference = reference.to(self._device).eval().requires_grad_(False)
        if data_parallel is not None:
            shard_model(model)  # before the optimiser: it must hold the sharded parameters
        self.build_optimizer()

    @classmethod
    def with_reference(cls, model: MoEForCausalLM, optim: OptimConfig | None = None, **kwargs: object) -> TorchBackend:
        """A backend whose reference policy is a frozen copy of `model`'s current weights."""
        return cls(model, optim, reference=copy.deepcopy(model), **kwargs)  # type: ignore[arg-type]

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def data_parallel(self) -> DataParallel | None:
        return self.dp

    # ------------------------------------------------------------------ forward
    def _forward(self, model: MoEForCausalLM, micro: TrainBatch, replay: bool, training: bool = False) -> TokenScores:
        """The micro-batch's log-probs `[b, t-1]`, with the teacher's top-k ids' `[b, t-1, K]` and the entropy when
        `training` (and the batch has top-k ids). Only response positions are scored: entries before a row's first
        response token are 0 (every consumer masks them with the response mask)."""
        micro = micro.to(self._device)
        routing = None
        if replay:
            if micro.replay_ids is None or micro.replay_mask is None:
                raise ValueError("router replay: expected a batch with routing (replay_ids), got none (dense model?)")
            routing = RouterReplay(micro.replay_ids, micro.replay_mask)
        bf16 = self.compute_dtype == "bfloat16"
        with torch.autocast(self._device.type, dtype=torch.bfloat16, enabled=bf16):
            return model.token_log_probs_at(
                micro.input_ids,
                micro.attention_mask,
                micro.teacher_top_ids if training else None,
                temperature=self.temperature,
                replay=routing,
                logits_from=(micro.prompt_lengths - 1).clamp(min=0),  # the first response token's logits onwards
                shared_prefix=micro.prompt_lengths if self.shares_prompts else None,  # a group's prompt once
                invariant=self.true_on_policy,  # bitwise the engine's sampled log-probs and routing
                with_entropy=training,
            )

    @torch.no_grad()
    def log_probs(
        self, micro_batches: Sequence[TrainBatch], *, replay: bool, role: PolicyRole = "policy"
    ) -> list[torch.Tensor]:
        model = self.model
        if role == "reference":
            if self.reference is None:
                raise ValueError("log_probs(role='reference'): expected a backend built with a reference, got none")
            model = self.reference
        return [self._forward(model, micro, replay).log_probs for micro in micro_batches]

    def forward_backward(self, micro: TrainBatch, loss_fn: LossFn, *, replay: bool) -> LossOutputs:
        scores = self._forward(self.model, micro, replay, training=True)
        out = loss_fn(scores.log_probs, scores.at)
        world = 1 if self.dp is None else self.dp.world_size
        (out.loss * world).backward()  # FSDP2 averages gradients over ranks; the loss has global denominators
        means = dict(out.means)
        if scores.entropy is not None:
            means["actor/entropy"] = masked_mean(scores.entropy, micro.response_mask.to(self._device))
        return LossOutputs(out.loss.detach(), means, out.sums, out.maxima)

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
        return super().state_dict()

    def load_state_dict(self, state: BackendState) -> None:
        self._single_process("load_state_dict")
        super().load_state_dict(state)
