"""ForwardTrace: a forward pass recorded op by op (for the precision probe): what every decoder layer's attention,
router, expert block and output produced, in forward order, as float32 copies on the CPU.

Ops per layer, in order: `attn_out` (the attention block's output, before the residual), `router_logits` (MoE
layers: the router's logits, `[tokens, experts]`), `topk` (MoE layers: the chosen expert ids, sorted per token),
`mlp_out` (the dense MLP's or the MoE block's output, before the residual) and `hidden` (the layer's output). Before
the layers: `embed`; after them: `logits`. Every value is per token, `[tokens, ...]` (the `[B, T]` input flattened
row-major). The model routes by itself (no replay): a routing flip shows up as a `topk` difference.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from moe_models.model import MoEForCausalLM
from moe_models.moe import SparseMoeBlock

OPS = ("attn_out", "router_logits", "topk", "mlp_out", "hidden")


@dataclass(frozen=True)
class TracePoint:
    """`layer`: the decoder layer (-1: the embedding; `num_layers`: the logits); `value` float32 (`topk`: int64)."""

    layer: int
    op: str
    value: torch.Tensor


def _keep(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").clone() if t.dtype == torch.int64 else t.detach().to("cpu", torch.float32).clone()


@torch.no_grad()
def trace_forward(
    model: MoEForCausalLM, input_ids: torch.Tensor, layers: Iterable[int] | None = None
) -> list[TracePoint]:
    """One forward of `input_ids` `[B, T]` (no padding) recorded at the ops above, for `layers` (None: every layer;
    `embed` and `logits` always). The model's dtype and ops are its own: a bf16 model records bf16 results (cast to
    float32 for comparison)."""
    wanted = set(range(model.config.num_hidden_layers)) if layers is None else set(layers)
    points: list[TracePoint] = []
    handles = []

    def hook(layer: int, op: str):  # type: ignore[no-untyped-def]
        def record(module: torch.nn.Module, args: tuple, output: object) -> None:  # type: ignore[type-arg]
            value = output[0] if isinstance(output, tuple) else output
            points.append(TracePoint(layer, op, _keep(value)))  # type: ignore[arg-type]

        return record

    def router_hook(layer: int):  # type: ignore[no-untyped-def]
        def record(module: torch.nn.Module, args: tuple, output: tuple) -> None:  # type: ignore[type-arg]
            points.append(TracePoint(layer, "router_logits", _keep(F.linear(args[0], module.weight))))
            points.append(TracePoint(layer, "topk", _keep(output[1].sort(dim=-1).values)))

        return record

    handles.append(model.model.embed_tokens.register_forward_hook(hook(-1, "embed")))
    for i, layer in enumerate(model.model.layers):
        if i not in wanted:
            continue
        handles.append(layer.self_attn.register_forward_hook(hook(i, "attn_out")))
        if isinstance(layer.mlp, SparseMoeBlock):
            handles.append(layer.mlp.gate.register_forward_hook(router_hook(i)))
        handles.append(layer.mlp.register_forward_hook(hook(i, "mlp_out")))
        handles.append(layer.register_forward_hook(hook(i, "hidden")))
    handles.append(model.lm_head.register_forward_hook(hook(model.config.num_hidden_layers, "logits")))
    try:
        model(input_ids)
    finally:
        for h in handles:
            h.remove()
    return points
