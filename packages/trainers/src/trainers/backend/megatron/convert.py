"""Weights between our Hugging Face layout (Qwen3-MoE names) and Megatron-Core's `GPTModel` built from the local
layer spec (`get_gpt_layer_local_spec(num_experts, moe_grouped_gemm=False, qk_layernorm=True)`), tensor parallel 1.

Pure tensor reshuffling, no Megatron import, so the default environment tests it. The Megatron side, per layer i:
- `decoder.layers.i.self_attention.linear_qkv.weight` [(n_q + 2 n_kv) d, hidden]: per query group g, the group's
  `n_q / n_kv` query heads, then its key head, then its value head (Megatron's grouped layout); HF keeps
  `q_proj` [n_q d, hidden], `k_proj` and `v_proj` [n_kv d, hidden] apart;
- `...mlp.experts.local_experts.j.linear_fc1.weight` [2 I, hidden] (gate rows then up rows, Megatron's GLU
  chunk order) and `linear_fc2.weight` [hidden, I] are HF's `gate_up_proj[e]` and `down_proj[e]` with
  e = rank_offset + j: under expert parallelism a rank holds experts `[rank * E / ep, (rank + 1) * E / ep)`;
- norms, router, attention output projection, embedding and output layer map one to one.
Round trip HF -> Megatron -> HF is exact (a copy, no arithmetic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

HF_LAYER = "model.layers.{i}."
MG_LAYER = "decoder.layers.{i}."
ONE_TO_ONE = {  # per layer: HF suffix -> Megatron suffix
    "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "pre_mlp_layernorm.weight",
    "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
    "self_attn.q_norm.weight": "self_attention.q_layernorm.weight",
    "self_attn.k_norm.weight": "self_attention.k_layernorm.weight",
    "mlp.gate.weight": "mlp.router.weight",
}
GLOBAL = {
    "model.embed_tokens.weight": "embedding.word_embeddings.weight",
    "model.norm.weight": "decoder.final_layernorm.weight",
    "lm_head.weight": "output_layer.weight",
}


@dataclass(frozen=True)
class Shape:
    """What the conversion needs of the model config; `ep_size`/`ep_rank` select this rank's experts."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_experts: int
    ep_size: int = 1
    ep_rank: int = 0

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"heads: expected a multiple of the kv heads, got {self.num_heads}, {self.num_kv_heads}")
        if self.ep_size < 1 or self.num_experts % self.ep_size or not 0 <= self.ep_rank < self.ep_size:
            raise ValueError(
                f"expert parallel: expected ep_size dividing {self.num_experts} and 0 <= ep_rank < "
                f"ep_size, got ep_size {self.ep_size}, ep_rank {self.ep_rank}"
            )

    @property
    def local_experts(self) -> range:
        n = self.num_experts // self.ep_size
        return range(self.ep_rank * n, (self.ep_rank + 1) * n)


def _qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: Shape) -> torch.Tensor:
    per = s.num_heads // s.num_kv_heads
    hidden = q.shape[-1]
    q = q.reshape(s.num_kv_heads, per * s.head_dim, hidden)
    k = k.reshape(s.num_kv_heads, s.head_dim, hidden)
    v = v.reshape(s.num_kv_heads, s.head_dim, hidden)
    return torch.cat([q, k, v], dim=1).reshape(-1, hidden)  # [(n_q + 2 n_kv) d, hidden]


def _split_qkv(qkv: torch.Tensor, s: Shape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    per = s.num_heads // s.num_kv_heads
    hidden = qkv.shape[-1]
    grouped = qkv.reshape(s.num_kv_heads, (per + 2) * s.head_dim, hidden)
    q, k, v = grouped.split([per * s.head_dim, s.head_dim, s.head_dim], dim=1)
    return q.reshape(-1, hidden), k.reshape(-1, hidden), v.reshape(-1, hidden)


def hf_to_megatron(hf: Mapping[str, torch.Tensor], s: Shape) -> dict[str, torch.Tensor]:
    """This rank's Megatron state dict (its experts only) from a full HF state dict."""
    out = {mg: hf[name] for name, mg in GLOBAL.items()}
    for i in range(s.num_layers):
        h, m = HF_LAYER.format(i=i), MG_LAYER.format(i=i)
        for hs, ms in ONE_TO_ONE.items():
            out[m + ms] = hf[h + hs]
        attn = h + "self_attn."
        out[m + "self_attention.linear_qkv.weight"] = _qkv(
            hf[attn + "q_proj.weight"], hf[attn + "k_proj.weight"], hf[attn + "v_proj.weight"], s
        )
        gate_up, down = hf[h + "mlp.experts.gate_up_proj"], hf[h + "mlp.experts.down_proj"]
        for j, e in enumerate(s.local_experts):
            out[m + f"mlp.experts.local_experts.{j}.linear_fc1.weight"] = gate_up[e]
            out[m + f"mlp.experts.local_experts.{j}.linear_fc2.weight"] = down[e]
    return out


def megatron_to_hf(ranks: list[Mapping[str, torch.Tensor]], s: Shape) -> dict[str, torch.Tensor]:
    """A full HF state dict from every expert-parallel rank's Megatron state dict (rank order; the non-expert
    weights are replicated, rank 0's are taken)."""
    if len(ranks) != s.ep_size:
        raise ValueError(f"megatron_to_hf: expected {s.ep_size} rank state dicts, got {len(ranks)}")
    first = ranks[0]
    out = {name: first[mg] for name, mg in GLOBAL.items()}
    for i in range(s.num_layers):
        h, m = HF_LAYER.format(i=i), MG_LAYER.format(i=i)
        for hs, ms in ONE_TO_ONE.items():
            out[h + hs] = first[m + ms]
        q, k, v = _split_qkv(first[m + "self_attention.linear_qkv.weight"], s)
        out[h + "self_attn.q_proj.weight"], out[h + "self_attn.k_proj.weight"] = q, k
        out[h + "self_attn.v_proj.weight"] = v
        n = s.num_experts // s.ep_size
        fc1 = [r[m + f"mlp.experts.local_experts.{j}.linear_fc1.weight"] for r in ranks for j in range(n)]
        fc2 = [r[m + f"mlp.experts.local_experts.{j}.linear_fc2.weight"] for r in ranks for j in range(n)]
        out[h + "mlp.experts.gate_up_proj"], out[h + "mlp.experts.down_proj"] = torch.stack(fc1), torch.stack(fc2)
    return out
