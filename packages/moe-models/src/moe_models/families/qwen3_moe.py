"""Qwen3-MoE (`Qwen3MoeForCausalLM`): GQA with per-head q/k RMSNorm, softmax top-k routing (optionally
renormalised), routed experts only; dense layers by `mlp_only_layers` / `decoder_sparse_step`. The base `Family`."""

from __future__ import annotations

from moe_models.families.family import Family


class Qwen3Moe(Family):
    """Everything is the base class's: its canonical names are this family's."""
