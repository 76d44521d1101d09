"""VeOmniBackend: VeOmni's Qwen3-MoE and its AdamW optimiser on one rank of a torch.distributed group (FSDP2 when
the group has several ranks), with router replay through VeOmni's hook. Compute only, like `TorchBackend`: what a
step does is `trainers.step`'s, run on every rank with the same batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from moe_models import RouterReplay, load_config
from moe_models.log_probs import next_token_entropy, next_token_log_probs
from torch import nn

from trainers.aggregation import masked_mean
from trainers.algorithm.loss_io import LossOutputs
from trainers.backend.data_parallel import DataParallel, full_state
from trainers.backend.optim_config import OptimConfig
from trainers.backend.optimised_module import RNG_KEY, OptimisedModule
from trainers.backend.protocol import LossFn, PolicyRole
from trainers.backend.state import BackendState
from trainers.backend.veomni.compat import build_model, init_parallel
from trainers.backend.veomni.replay import moe_routers, replaying
from trainers.backend.veomni.support import veomni_family_refusal
from trainers.batch import TrainBatch


class VeOmniBackend(OptimisedModule):
    """Implements `trainers.backend.TrainingBackend`. `checkpoint_dir`: a Hugging Face checkpoint of a family
    `VeOmniBackendConfig.families` names (others raise with the reason). `data_parallel`: this rank's place in the
    default process group, whose device it computes on (None: one process, VeOmni's model unsharded, on `device`).
    `reference`: also build a frozen, unsharded copy of the base weights (for a KL term)."""

    def __init__(
        self,
        checkpoint_dir: str,
        optim: OptimConfig | None = None,
        *,
        temperature: float = 1.0,
        vocab_size: int | None = None,
        data_parallel: DataParallel | None = None,
        reference: bool = False,
        total_steps: int | None = None,
        compute_dtype: str = "float32",
        device: str = "cpu",
    ) -> None:
        if not temperature > 0:
            raise ValueError(f"VeOmniBackend: expected temperature > 0, got {temperature}")
        if compute_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"VeOmniBackend.compute_dtype: expected float32 or bfloat16, got {compute_dtype!r}")
        refused = veomni_family_refusal(load_config(checkpoint_dir).model_type)
        if refused:
            raise ValueError(f"VeOmniBackend({checkpoint_dir}): {refused}")
        self.dp = data_parallel
        world = 1 if data_parallel is None else data_parallel.world_size
        self._device = torch.device(device) if data_parallel is None else data_parallel.device
        init_parallel(world, self._device.type)
        model = build_model(checkpoint_dir, world).to(self._device)
        super().__init__(model.train(), optim, total_steps=total_steps)
        self.temperature, self.compute_dtype = temperature, compute_dtype
        self.vocab_size = vocab_size  # the tokenizer's ids: the only ones scored (None: every row)
        self.routers = moe_routers(model)
        self.reference: nn.Module | None = None
        self.reference_routers: list[nn.Module] = []
        if reference:
            self.reference = build_model(checkpoint_dir, world, shard=False).to(self._device).eval()
            self.reference.requires_grad_(False)
            self.reference_routers = moe_routers(self.reference)
        self.build_optimizer()

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def data_parallel(self) -> DataParallel | None:
        return self.dp

    # ------------------------------------------------------------------ forward
    def _forward(
        self, model: nn.Module, routers: list[nn.Module], micro: TrainBatch, replay: bool, top_k: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """([b, t-1] float32 log-probs, [b, t-1, K] of the teacher's top-k ids when `top_k` and the batch has them,
        [b, t-1] entropies (no gradient) when `top_k`, i.e. when training)."""
        micro = micro.to(self._device)
        routing = None
        if replay:
            if micro.replay_ids is None or micro.replay_mask is None:
                raise ValueError("router replay: expected a batch with routing (replay_ids), got none (dense model?)")
            routing = RouterReplay(micro.replay_ids, micro.replay_mask)
            cfg = model.config
            b, t = micro.input_ids.shape
            routing.validate(b, t, len(routers), cfg.num_experts_per_tok, cfg.num_experts)
        bf16 = self.compute_dtype == "bfloat16"
        with replaying(routers, routing), torch.autocast(self._device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=micro.input_ids, attention_mask=micro.attention_mask, use_cache=False).logits
        at_ids = micro.teacher_top_ids if top_k else None
        log_probs, at = next_token_log_probs(
            logits, micro.input_ids, at_ids, temperature=self.temperature, vocab_size=self.vocab_size
        )
        entropy = (
            next_token_entropy(logits, temperature=self.temperature, vocab_size=self.vocab_size) if top_k else None
        )
        return log_probs, at, entropy

    @torch.no_grad()
    def log_probs(
        self, micro_batches: Sequence[TrainBatch], *, replay: bool, role: PolicyRole = "policy"
    ) -> list[torch.Tensor]:
        model, routers = self.model, self.routers
        if role == "reference":
            if self.reference is None:
                raise ValueError("log_probs(role='reference'): expected a backend built with a reference, got none")
            model, routers = self.reference, self.reference_routers
        return [self._forward(model, routers, micro, replay)[0] for micro in micro_batches]

    def forward_backward(self, micro: TrainBatch, loss_fn: LossFn, *, replay: bool) -> LossOutputs:
        log_probs, at, entropy = self._forward(self.model, self.routers, micro, replay, top_k=True)
        out = loss_fn(log_probs, at)
        world = 1 if self.dp is None else self.dp.world_size
        (out.loss * world).backward()  # FSDP2 averages gradients over ranks; the loss has global denominators
        means = {**out.means, "actor/entropy": masked_mean(entropy, micro.response_mask.to(self._device))}
        return LossOutputs(out.loss.detach(), means, out.sums, out.maxima)

    # ------------------------------------------------------------------ weights and checkpoints
    def export_weights(self) -> tuple[dict[str, torch.Tensor], int]:
        """Full weights on every rank (all-gathered when sharded) by Hugging Face name in the in-memory layout our
        engines read, CPU tensors in their own dtype; the tied lm_head alias omitted."""
        return full_state(self.model), self._version

    def state_dict(self) -> BackendState:
        """The full (unsharded) weights and AdamW state, in `OptimisedModule`'s format, and this rank's torch RNG
        (a collective under FSDP2: every rank calls it)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=StateDictOptions(full_state_dict=True))
        tensors = {f"model.{k}": _host(v) for k, v in model_sd.items()}
        index = {name: i for i, name in enumerate(self._param_names)}
        for name, entry in optim_sd["state"].items():
            for key, value in entry.items():
                tensors[f"optim.{index[name]}.{key}"] = _host(torch.as_tensor(value))
        tensors[RNG_KEY] = torch.get_rng_state()
        groups = [
            {
                k: [index[p] for p in v] if k == "params" else list(v) if isinstance(v, tuple) else v
                for k, v in g.items()
            }
            for g in optim_sd["param_groups"]
        ]
        return BackendState(tensors, self._version, groups, list(self._param_names))

    def load_state_dict(self, state: BackendState) -> None:
        """Every rank passes the same full state (a collective under FSDP2)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        if state.optimizer_param_names != self._param_names:
            got = state.optimizer_param_names
            raise ValueError(
                f"load_state_dict: expected optimiser parameters {self._param_names[:3]}..., got "
                f"{got[:3]}... ({len(got)} names)"
            )
        if RNG_KEY not in state.tensors:
            raise ValueError(f"load_state_dict: expected the tensor {RNG_KEY!r} in the state, got none")
        model_sd = {k[len("model.") :]: v for k, v in state.tensors.items() if k.startswith("model.")}
        per_param: dict[str, dict[str, torch.Tensor]] = {}
        for key, value in state.tensors.items():
            if key.startswith("optim."):
                _, i, name = key.split(".", 2)
                per_param.setdefault(self._param_names[int(i)], {})[name] = value
        groups = [
            {
                k: [self._param_names[p] for p in v] if k == "params" else tuple(v) if k == "betas" else v
                for k, v in g.items()
            }
            for g in state.optimizer_groups
        ]
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=model_sd,
            optim_state_dict={"state": per_param, "param_groups": groups},
            options=StateDictOptions(full_state_dict=True),
        )
        torch.set_rng_state(state.tensors[RNG_KEY])
        self._version = state.version


def _host(t: torch.Tensor) -> torch.Tensor:
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.detach().to("cpu", copy=True)
