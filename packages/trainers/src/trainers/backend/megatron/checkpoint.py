"""The Megatron backend's weights and AdamW state in our names and layout (`TorchBackend`'s `BackendState` format),
so a checkpoint does not depend on how the experts were split, and the engines get the weights they load.

Weights convert by the family's `FamilyBuild` (after the experts are all-gathered over the expert-parallel group;
back, this rank's experts only). The model's persistent buffers (DeepSeek-V3's router `e_score_correction_bias`)
travel with the weights, as in our model's state dict; AdamW's moments have their weight's shape, so they convert as
the weights do. Every weight steps every time (`grads.fill_missing_grads`), so one step count stands for all.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from torch import nn

from trainers.backend.megatron.family_build import FamilyBuild
from trainers.backend.megatron.grads import is_expert
from trainers.backend.optimised_module import RNG_KEY
from trainers.backend.state import BackendState

MOMENTS = ("exp_avg", "exp_avg_sq")


def persistent_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """The module's buffers that its state dict carries (Megatron's router `expert_bias`, not its token counter)."""
    kept = set(model.state_dict(keep_vars=True))
    return {name: b for name, b in model.named_buffers() if name in kept}


class MegatronState:
    """`build`: this rank's family build; `names`: our model's parameter names in order (the optimiser index of
    each, as `TorchBackend` numbers them); `state_names`: our model's state-dict names (parameters and persistent
    buffers, the tied lm_head alias aside)."""

    def __init__(self, build: FamilyBuild, names: list[str], state_names: list[str]) -> None:
        self.build, self.names, self.state_names = build, names, state_names

    def to_ours(self, local: Mapping[str, torch.Tensor], *, buffers: bool = False) -> dict[str, torch.Tensor]:
        """Our full tensors (`state_names` with `buffers`, else `names`) from this rank's Megatron-named ones (a
        collective over the expert-parallel group)."""
        host = {k: v.detach().to("cpu", copy=True) for k, v in local.items()}
        experts = {k: v for k, v in host.items() if is_expert(k)}
        parts: list[dict[str, torch.Tensor]] = [experts]
        if self.build.ep_size > 1:
            parts = [{} for _ in range(self.build.ep_size)]
            dist.all_gather_object(parts, experts, group=parallel_state.get_expert_model_parallel_group())
        ranks = [{**host, **part} for part in parts]  # dense from this rank: replicated
        ours = self.build.to_ours(ranks, buffers=buffers)
        return {name: ours[name].contiguous() for name in (self.state_names if buffers else self.names)}

    def export(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Our model's full state dict (parameters and persistent buffers) from this rank's model (a collective)."""
        return self.to_ours({**dict(model.named_parameters()), **persistent_buffers(model)}, buffers=True)

    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, version: int) -> BackendState:
        named = dict(model.named_parameters())
        tensors = {f"model.{k}": v for k, v in self.export(model).items()}
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
        targets = {**named, **persistent_buffers(model)}
        missing = [n for n in self.state_names if f"model.{n}" not in state.tensors]
        if missing:
            raise ValueError(f"load_state_dict: expected every weight and buffer of ours, got none for {missing[:3]}")
        weights = self.build.to_megatron({n: state.tensors[f"model.{n}"] for n in self.state_names}, buffers=True)
        with torch.no_grad():
            for name, target in targets.items():
                target.copy_(weights[name])
        per_param: dict[int, dict[str, torch.Tensor]] = {}
        if f"optim.0.{MOMENTS[0]}" in state.tensors:
            moments = {
                key: self.build.to_megatron(
                    {n: state.tensors[f"optim.{i}.{key}"] for i, n in enumerate(self.names)}, buffers=False
                )
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
