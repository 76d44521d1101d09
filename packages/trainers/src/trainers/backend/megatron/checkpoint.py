"""The Megatron backend's weights and AdamW state in our names and layout (`TorchBackend`'s `BackendState` format),
so a checkpoint does not depend on how the experts were split, and the engines get the weights they load.

AdamW's moments have their weight's shape, so they convert as weights do (`convert.megatron_to_hf` after the
experts are all-gathered over the expert-parallel group; `convert.hf_to_megatron` back, this rank's experts only).
Every weight steps every time (`grads.fill_missing_grads`), so one step count stands for all of them.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from torch import nn

from trainers.backend.megatron.convert import Shape, hf_to_megatron, megatron_to_hf
from trainers.backend.megatron.grads import is_expert
from trainers.backend.optimised_module import RNG_KEY
from trainers.backend.state import BackendState

MOMENTS = ("exp_avg", "exp_avg_sq")


class MegatronState:
    """`shape`: this rank's conversion shape; `names`: our model's parameter names in order (the optimiser index
    of each, as `TorchBackend` numbers them)."""

    def __init__(self, shape: Shape, names: list[str]) -> None:
        self.shape, self.names = shape, names

    def to_ours(self, local: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Our full tensors from this rank's Megatron-named ones (a collective over the expert-parallel group)."""
        host = {k: v.detach().to("cpu", copy=True) for k, v in local.items()}
        experts = {k: v for k, v in host.items() if is_expert(k)}
        parts: list[dict[str, torch.Tensor]] = [experts]
        if self.shape.ep_size > 1:
            parts = [{} for _ in range(self.shape.ep_size)]
            dist.all_gather_object(parts, experts, group=parallel_state.get_expert_model_parallel_group())
        ranks = [{**host, **part} for part in parts]  # dense from this rank: replicated
        ours = megatron_to_hf(ranks, self.shape)
        return {name: ours[name].contiguous() for name in self.names}

    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, version: int) -> BackendState:
        named = dict(model.named_parameters())
        tensors = {f"model.{k}": v for k, v in self.to_ours(named).items()}
        states = [optimizer.state.get(p, {}) for p in named.values()]
        stepped = bool(states) and all("step" in s for s in states)
        if stepped:
            for key in MOMENTS:
                ours = self.to_ours({n: optimizer.state[p][key] for n, p in named.items()})
                tensors.update({f"optim.{i}.{key}": ours[name] for i, name in enumerate(self.names)})
            step = states[0]["step"]
            if any(not torch.equal(s["step"], step) for s in states):
                raise RuntimeError("MegatronBackend.state_dict: expected one AdamW step count for every weight")
            tensors.update({f"optim.{i}.step": step.detach().to("cpu", copy=True) for i in range(len(self.names))})
        tensors[RNG_KEY] = torch.get_rng_state()
        group = {
            k: list(v) if isinstance(v, tuple) else v for k, v in optimizer.state_dict()["param_groups"][0].items()
        }
        group["params"] = list(range(len(self.names)))
        return BackendState(tensors, version, [group], list(self.names))

    def load(self, state: BackendState, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if state.optimizer_param_names != self.names:
            got = state.optimizer_param_names
            raise ValueError(
                f"load_state_dict: expected optimiser parameters {self.names[:3]}..., got {got[:3]}... "
                f"({len(got)} names)"
            )
        if RNG_KEY not in state.tensors or len(state.optimizer_groups) != 1:
            raise ValueError(
                f"load_state_dict: expected {RNG_KEY!r} and one optimiser group, got "
                f"{RNG_KEY in state.tensors} and {len(state.optimizer_groups)} groups"
            )
        named = dict(model.named_parameters())
        weights = self._local({n: state.tensors[f"model.{n}"] for n in self.names})
        with torch.no_grad():
            for name, p in named.items():
                p.copy_(weights[name])
        per_param: dict[int, dict[str, torch.Tensor]] = {}
        if f"optim.0.{MOMENTS[0]}" in state.tensors:
            moments = {
                key: self._local({n: state.tensors[f"optim.{i}.{key}"] for i, n in enumerate(self.names)})
                for key in MOMENTS
            }
            step = state.tensors["optim.0.step"]
            for j, (name, p) in enumerate(named.items()):
                entry = {key: moments[key][name].to(p.device, copy=True) for key in MOMENTS}
                per_param[j] = {"step": step.clone(), **entry}
        group = {k: tuple(v) if k == "betas" else v for k, v in state.optimizer_groups[0].items()}
        group["params"] = list(range(len(named)))
        optimizer.load_state_dict({"state": per_param, "param_groups": [group]})
        torch.set_rng_state(state.tensors[RNG_KEY])

    def _local(self, ours: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return hf_to_megatron(ours, self.shape)
