"""Weights between transformers' in-memory DeepSeek-V3 layout (`DeepseekV3ForCausalLM.state_dict()` names, keyed
by its `config.json` fields) and Megatron-Core's `GPTModel` built from the local multi-latent-attention layer spec
(`deepseek_gpt`), tensor parallel 1.

Pure tensor reshuffling, no Megatron import, so the default environment tests it. Per layer i (HF `model.layers.i.`,
Megatron `decoder.layers.i.`):
- attention: `q_proj` -> `self_attention.linear_q_proj` (q_lora_rank null), or `q_a_proj`, `q_a_layernorm`,
  `q_b_proj` -> `linear_q_down_proj`, `q_layernorm`, `linear_q_up_proj`; `kv_a_proj_with_mqa`, `kv_a_layernorm`,
  `kv_b_proj`, `o_proj` -> `linear_kv_down_proj`, `kv_layernorm`, `linear_kv_up_proj`, `linear_proj`. Both sides
  lay a query head out as [qk_nope | qk_rope] and the down-projected kv as [kv_lora_rank | qk_rope].
- RoPE rows: Megatron's MLA always de-interleaves the rope part (`x[0::2]`, then `x[1::2]`) before rotating it,
  which is transformers' `rope_interleave: true`. For `rope_interleave: false` the rope rows of the query and of
  `kv_a_proj_with_mqa` are interleaved on the way in (Megatron row 2j is HF row j, row 2j+1 is HF row r/2 + j, r =
  qk_rope_head_dim), so Megatron's de-interleave gives back transformers' order, and un-interleaved on the way out.
- the first `first_k_dense_replace` layers: `mlp.{gate,up}_proj` -> `mlp.linear_fc1` (gate rows, then up rows),
  `mlp.down_proj` -> `mlp.linear_fc2`;
- the other (MoE) layers: `mlp.gate.weight` -> `mlp.router.weight`, `mlp.gate.e_score_correction_bias` ->
  `mlp.router.expert_bias` (a buffer on both sides), `mlp.experts.gate_up_proj[e]` ([2I, H], gate rows first) and
  `down_proj[e]` -> `mlp.experts.local_experts.j.linear_fc1` / `linear_fc2` with e = this rank's first expert + j
  (a rank holds experts `[rank * E / ep, (rank + 1) * E / ep)`), and `mlp.shared_experts.{gate,up}_proj` ->
  `mlp.shared_experts.linear_fc1`, `down_proj` -> `linear_fc2`.
Round trip HF -> Megatron -> HF is exact (copies and row permutations, no arithmetic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

HF_LAYER = "model.layers.{i}."
MG_LAYER = "decoder.layers.{i}."
GLOBAL = {
    "model.embed_tokens.weight": "embedding.word_embeddings.weight",
    "model.norm.weight": "decoder.final_layernorm.weight",
    "lm_head.weight": "output_layer.weight",
}
NORMS = {
    "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "pre_mlp_layernorm.weight",
}
ATTENTION = {  # HF suffix -> Megatron suffix, copied as they are (the rope rows aside)
    "self_attn.q_proj.weight": "self_attention.linear_q_proj.weight",
    "self_attn.q_a_proj.weight": "self_attention.linear_q_down_proj.weight",
    "self_attn.q_a_layernorm.weight": "self_attention.q_layernorm.weight",
    "self_attn.q_b_proj.weight": "self_attention.linear_q_up_proj.weight",
    "self_attn.kv_a_proj_with_mqa.weight": "self_attention.linear_kv_down_proj.weight",
    "self_attn.kv_a_layernorm.weight": "self_attention.kv_layernorm.weight",
    "self_attn.kv_b_proj.weight": "self_attention.linear_kv_up_proj.weight",
    "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
}
Q_LORA_ONLY = ("self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight")
ROUTER = {"mlp.gate.weight": "mlp.router.weight"}
ROUTER_BIAS = {"mlp.gate.e_score_correction_bias": "mlp.router.expert_bias"}
EXPERTS = "mlp.experts.local_experts.{j}."


@dataclass(frozen=True)
class MlaShape:
    """What the conversion needs of a DeepSeek-V3 config; `ep_size`/`ep_rank` select this rank's experts."""

    num_layers: int
    num_heads: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    kv_lora_rank: int
    q_lora_rank: int | None
    first_k_dense_replace: int
    num_experts: int
    rope_interleave: bool
    ep_size: int = 1
    ep_rank: int = 0

    def __post_init__(self) -> None:
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim: expected an even number, got {self.qk_rope_head_dim}")
        if not 0 <= self.first_k_dense_replace <= self.num_layers:
            raise ValueError(
                f"first_k_dense_replace: expected 0..{self.num_layers} (num_hidden_layers), "
                f"got {self.first_k_dense_replace}"
            )
        if self.ep_size < 1 or self.num_experts % self.ep_size or not 0 <= self.ep_rank < self.ep_size:
            raise ValueError(
                f"expert parallel: expected ep_size dividing {self.num_experts} and 0 <= ep_rank < "
                f"ep_size, got ep_size {self.ep_size}, ep_rank {self.ep_rank}"
            )

    @classmethod
    def from_hf_config(cls, cfg: Mapping[str, Any], *, ep_size: int = 1, ep_rank: int = 0) -> MlaShape:
        """From a DeepSeek-V3 `config.json` dict (transformers' field names)."""
        return cls(
            num_layers=cfg["num_hidden_layers"],
            num_heads=cfg["num_attention_heads"],
            qk_nope_head_dim=cfg["qk_nope_head_dim"],
            qk_rope_head_dim=cfg["qk_rope_head_dim"],
            kv_lora_rank=cfg["kv_lora_rank"],
            q_lora_rank=cfg["q_lora_rank"],  # present even when null: transformers' default is 1536
            first_k_dense_replace=cfg["first_k_dense_replace"],
            num_experts=cfg["n_routed_experts"],
            rope_interleave=cfg.get("rope_interleave", True),
            ep_size=ep_size,
            ep_rank=ep_rank,
        )

    @property
    def local_experts(self) -> range:
        n = self.num_experts // self.ep_size
        return range(self.ep_rank * n, (self.ep_rank + 1) * n)

    def is_moe(self, layer: int) -> bool:
        return layer >= self.first_k_dense_replace

    @property
    def moe_layers(self) -> list[int]:
        """The layers with a router, in order: replay rows have one column per entry."""
        return [i for i in range(self.num_layers) if self.is_moe(i)]


def _rope_order(s: MlaShape, inverse: bool) -> torch.Tensor:
    """Row order of the r rope rows, Megatron row m = HF row order[m] (inverse: HF row from Megatron rows)."""
    half = s.qk_rope_head_dim // 2
    order = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).reshape(-1)
    return torch.argsort(order) if inverse else order


def _permute_query_rope(w: torch.Tensor, s: MlaShape, inverse: bool) -> torch.Tensor:
    """`w` [heads * (nope + rope), in]: each head's rope rows reordered (see the module docstring)."""
    if s.rope_interleave:
        return w
    heads = w.reshape(s.num_heads, s.qk_nope_head_dim + s.qk_rope_head_dim, -1)
    nope, rope = heads.split([s.qk_nope_head_dim, s.qk_rope_head_dim], dim=1)
    return torch.cat([nope, rope[:, _rope_order(s, inverse)]], dim=1).reshape(w.shape)


def _permute_kv_rope(w: torch.Tensor, s: MlaShape, inverse: bool) -> torch.Tensor:
    """`w` [kv_lora_rank + rope, hidden]: the trailing rope rows reordered."""
    if s.rope_interleave:
        return w
    latent, rope = w.split([s.kv_lora_rank, s.qk_rope_head_dim], dim=0)
    return torch.cat([latent, rope[_rope_order(s, inverse)]], dim=0)


def _attention_names(s: MlaShape) -> dict[str, str]:
    skip = ("self_attn.q_proj.weight",) if s.q_lora_rank is not None else Q_LORA_ONLY
    return {h: m for h, m in ATTENTION.items() if h not in skip}


def _dense_names(s: MlaShape, layer: int, buffers: bool) -> dict[str, str]:
    """HF -> Megatron names of every per-layer tensor copied one to one (experts and fused GLUs aside)."""
    names = {**NORMS, **_attention_names(s)}
    if s.is_moe(layer):
        names.update(ROUTER)
        if buffers:
            names.update(ROUTER_BIAS)
    return names


def _permute_rope(hf_suffix: str, w: torch.Tensor, s: MlaShape, inverse: bool) -> torch.Tensor:
    if hf_suffix in ("self_attn.q_proj.weight", "self_attn.q_b_proj.weight"):
        return _permute_query_rope(w, s, inverse)
    if hf_suffix == "self_attn.kv_a_proj_with_mqa.weight":
        return _permute_kv_rope(w, s, inverse)
    return w


def hf_to_megatron(hf: Mapping[str, torch.Tensor], s: MlaShape, *, buffers: bool = True) -> dict[str, torch.Tensor]:
    """This rank's Megatron state dict (its experts only) from a full HF in-memory state dict. `buffers`: also the
    routers' `expert_bias` (from `e_score_correction_bias`); False converts parameters (or their AdamW moments)
    only."""
    out = {mg: hf[name] for name, mg in GLOBAL.items()}
    for i in range(s.num_layers):
        h, m = HF_LAYER.format(i=i), MG_LAYER.format(i=i)
        for hs, ms in _dense_names(s, i, buffers).items():
            out[m + ms] = _permute_rope(hs, hf[h + hs], s, inverse=False)
        if not s.is_moe(i):
            out[m + "mlp.linear_fc1.weight"] = torch.cat([hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]])
            out[m + "mlp.linear_fc2.weight"] = hf[h + "mlp.down_proj.weight"]
            continue
        shared = h + "mlp.shared_experts."
        out[m + "mlp.shared_experts.linear_fc1.weight"] = torch.cat(
            [hf[shared + "gate_proj.weight"], hf[shared + "up_proj.weight"]]
        )
        out[m + "mlp.shared_experts.linear_fc2.weight"] = hf[shared + "down_proj.weight"]
        gate_up, down = hf[h + "mlp.experts.gate_up_proj"], hf[h + "mlp.experts.down_proj"]
        for j, e in enumerate(s.local_experts):
            out[m + EXPERTS.format(j=j) + "linear_fc1.weight"] = gate_up[e]
            out[m + EXPERTS.format(j=j) + "linear_fc2.weight"] = down[e]
    return out


def megatron_to_hf(
    ranks: list[Mapping[str, torch.Tensor]], s: MlaShape, *, buffers: bool = True
) -> dict[str, torch.Tensor]:
    """A full HF in-memory state dict from every expert-parallel rank's Megatron state dict (rank order; the
    non-expert tensors are replicated, rank 0's are taken). `buffers` as in `hf_to_megatron`."""
    if len(ranks) != s.ep_size:
        raise ValueError(f"megatron_to_hf: expected {s.ep_size} rank state dicts, got {len(ranks)}")
    first = ranks[0]
    out = {name: first[mg] for name, mg in GLOBAL.items()}
    n = s.num_experts // s.ep_size
    for i in range(s.num_layers):
        h, m = HF_LAYER.format(i=i), MG_LAYER.format(i=i)
        for hs, ms in _dense_names(s, i, buffers).items():
            out[h + hs] = _permute_rope(hs, first[m + ms], s, inverse=True)
        if not s.is_moe(i):
            out[h + "mlp.gate_proj.weight"], out[h + "mlp.up_proj.weight"] = first[m + "mlp.linear_fc1.weight"].chunk(2)
            out[h + "mlp.down_proj.weight"] = first[m + "mlp.linear_fc2.weight"]
            continue
        shared = h + "mlp.shared_experts."
        out[shared + "gate_proj.weight"], out[shared + "up_proj.weight"] = first[
            m + "mlp.shared_experts.linear_fc1.weight"
        ].chunk(2)
        out[shared + "down_proj.weight"] = first[m + "mlp.shared_experts.linear_fc2.weight"]
        fc1 = [r[m + EXPERTS.format(j=j) + "linear_fc1.weight"] for r in ranks for j in range(n)]
        fc2 = [r[m + EXPERTS.format(j=j) + "linear_fc2.weight"] for r in ranks for j in range(n)]
        out[h + "mlp.experts.gate_up_proj"], out[h + "mlp.experts.down_proj"] = torch.stack(fc1), torch.stack(fc2)
    return out
