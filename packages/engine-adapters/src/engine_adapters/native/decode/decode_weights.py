"""Fused, contiguous copies of the weights the decode step reads, rebuilt whenever a parameter of the model changes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from moe_models import MoEForCausalLM
from moe_models.attention import Attention
from moe_models.decoder_layer import DecoderLayer
from moe_models.moe import DenseMLP, SparseMoeBlock

# (the owning module's parameter dict, name, parameter, its version counter, its storage address) per parameter
ParamStamp = tuple[dict[str, torch.nn.Parameter | None], str, torch.Tensor, int, int]


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's weights in the layouts the decode step wants (copies, never views of parameters).

    qkv: [(H + 2 * KVH) * D, hidden], rows q_proj then k_proj then v_proj; qkv_bias [(H + 2 * KVH) * D] or None.
    qk_norm: [H + KVH, D], q_norm's weight for each query head then k_norm's for each kv head (None: the family
    has no q/k norm). MoE layers: gate_up [E, hidden, 2I] and down [E, I, hidden] (transposed, contiguous, for
    grouped_mm). Dense layers: gate_up [2I_dense, hidden] (gate rows then up rows).
    """

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    qk_norm: torch.Tensor | None
    gate_up: torch.Tensor
    down: torch.Tensor | None  # MoE layers only (dense layers use mlp.down_proj directly)
    expert_ids: torch.Tensor | None  # [E] int64 0 .. E-1 (MoE layers only)


@dataclass(frozen=True)
class DecodeWeights:
    """Derived weights plus stamps of the parameter state they were built from.

    Invariant: valid iff every stamp still holds: the module still owns the same Parameter object, whose in-place
    version counter and storage address are unchanged. So `load_state_dict_numpy` (in-place copies), optimizer
    steps, `.to()` and re-assigned Parameters all invalidate it. A model holding inference tensors as parameters
    has no version counters: `stamps` is None and the weights are rebuilt on every call (correct, only slower).
    """

    stamps: list[ParamStamp] | None
    layers: list[LayerWeights]

    def is_current(self) -> bool:
        if self.stamps is None:
            return False
        return all(
            owner.get(name) is p and p._version == version and p.data_ptr() == ptr
            for owner, name, p, version, ptr in self.stamps
        )


def _stamps(model: MoEForCausalLM) -> list[ParamStamp] | None:
    stamps: list[ParamStamp] = []
    for module in model.modules():
        for name, p in module._parameters.items():
            if p is None:
                continue
            if p.is_inference():
                return None
            stamps.append((module._parameters, name, p, p._version, p.data_ptr()))
    return stamps


def _layer_weights(layer: DecoderLayer) -> LayerWeights:
    attn = layer.self_attn
    if not isinstance(attn, Attention):
        raise ValueError(f"decode weights: got {type(attn).__name__}, expected GQA attention (the fast decode step's)")
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    qkv = torch.cat([p.weight for p in projections], dim=0)
    qkv_bias = None if attn.q_proj.bias is None else torch.cat([p.bias for p in projections]).contiguous()
    qk_norm = None
    if attn.q_norm is not None and attn.k_norm is not None:
        qk_norm = torch.cat(
            [
                attn.q_norm.weight[None].expand(attn.num_heads, -1),
                attn.k_norm.weight[None].expand(attn.num_kv_heads, -1),
            ]
        ).contiguous()
    mlp = layer.mlp
    if isinstance(mlp, SparseMoeBlock):
        gate_up = mlp.experts.gate_up_proj.transpose(1, 2).contiguous()
        down: torch.Tensor | None = mlp.experts.down_proj.transpose(1, 2).contiguous()
        expert_ids: torch.Tensor | None = torch.arange(mlp.experts.num_experts, device=gate_up.device)
    elif isinstance(mlp, DenseMLP):
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight], dim=0)
        down = expert_ids = None
    else:
        raise ValueError(f"decode weights: got a {type(mlp).__name__} feed-forward, expected SparseMoeBlock/DenseMLP")
    return LayerWeights(qkv.contiguous(), qkv_bias, qk_norm, gate_up, down, expert_ids)


def decode_weights(model: MoEForCausalLM, cached: DecodeWeights | None) -> DecodeWeights:
    """`cached` when it is still current for the model's parameters, else a fresh build."""
    if cached is not None and cached.is_current():
        return cached
    with torch.no_grad():
        stamps = _stamps(model)
        layers = [_layer_weights(layer) for layer in model.model.layers]
    return DecodeWeights(stamps=stamps, layers=layers)
