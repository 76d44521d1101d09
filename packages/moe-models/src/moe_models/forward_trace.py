"""ForwardTrace: a forward pass recorded op by op (for the precision probe): what every decoder layer's attention,
router, expert block and output produced, in forward order, as float32 copies on the CPU.

Ops per layer, in order: `attn_out` (the attention block's output, before the residual), `router_logits` (MoE
layers: the router's logits, `[tokens, experts]`), `topk` (MoE layers: the chosen expert ids, sorted per token),
`mlp_out` (the dense MLP's or the routed experts' output, before the residual), `shared_out` (MoE layers of families
with a shared expert: its output, gated where the family gates it) and `hidden` (the layer's output). Before
the layers: `embed`; after them: `logits`. Every value is per token, `[tokens, ...]` (the `[B, T]` input flattened
row-major). The model routes by itself (no replay): a routing flip shows up as a `topk` difference. The points are
those the decoder reports to its context's trace hook (`ForwardContext.record`), so the trace is the model's own
forward, not a copy of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from moe_models.model import MoEForCausalLM

OPS = ("attn_out", "router_logits", "topk", "mlp_out", "shared_out", "hidden")


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
    last = model.config.num_hidden_layers
    wanted = set(range(last)) if layers is None else set(layers)
    points: list[TracePoint] = []

    def record(layer: int, op: str, value: torch.Tensor) -> None:
        if layer in wanted or layer in (-1, last):
            points.append(TracePoint(layer, op, _keep(value)))

    model(input_ids, trace=record)
    return points
