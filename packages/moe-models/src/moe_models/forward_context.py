"""ForwardContext: everything one forward of the decoder reads besides the weights.

The decoder (`MoEForCausalLM.decode`) is written once; what differs between training and the engine's prefill or
decode is the context it is given: where its `N` tokens sit (their rotary positions), how attention finds their keys
(a padded grid of whole sequences, a slot KV cache), which kernels run the matmuls and the experts, which layers'
outputs are wanted, the routing to replay, whether the ops are batch-invariant (true on-policy mode) and a trace
hook that sees every op's output (the precision probe).

A subclass supplies `attend`; the other ops default to the model's own modules. An op a subclass replaces must keep
its contract (shapes, dtypes and the math, to float rounding), so that every context computes the same model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F

from moe_models.experts_module import ExpertsModule
from moe_models.invariant_ops import invariant_experts, invariant_linear, invariant_pointwise

TraceHook = Callable[[int, str, torch.Tensor], None]
"""(layer, op, value): layer -1 is the embedding, `num_hidden_layers` the logits; ops as `forward_trace.OPS`."""


class AttentionModule(Protocol):
    """`moe_models.attention.Attention` and `moe_models.mla.LatentAttention`: `head_dim` is the query/key dim per
    head, `value_dim` the value dim; `sinks` `[H]` or None; `sliding_window` None or W (a query at position p sees
    keys p - W + 1 .. p)."""

    layer_idx: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    value_dim: int
    group_size: int
    scaling: float
    sinks: torch.Tensor | None
    sliding_window: int | None

    def query(
        self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, ctx: ForwardContext
    ) -> torch.Tensor: ...

    def key_value(
        self, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, ctx: ForwardContext
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


class MLPModule(Protocol):
    """`moe_models.moe.DenseMLP`."""

    def __call__(self, x: torch.Tensor, ctx: ForwardContext) -> torch.Tensor: ...


class ForwardContext:
    """positions `[N]` int64: the rotary position of each of the forward's N tokens (flat, in the caller's order).

    invariant: every op batch-invariant (`invariant_ops`): a token's results do not depend on the other tokens of
    the call, on padding or on how many positions follow it, bit for bit. trace: called with every op's output.
    """

    def __init__(self, positions: torch.Tensor, *, invariant: bool = False, trace: TraceHook | None = None) -> None:
        self.positions = positions
        self.invariant = invariant
        self.trace = trace

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x `[..., in]` @ weight `[out, in]`^T (+ bias `[out]`)."""
        if not self.invariant:
            return F.linear(x, weight, bias)
        out = invariant_linear(x, weight)
        return out if bias is None else out + bias

    def project(
        self,
        attn: AttentionModule,
        h: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        queries: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated q `[M, H, D]` of the `queries` rows of h `[N, hidden]` (normed), rotated k and v `[N, KVH, D]` of
        all rows; cos/signed_sin `[N, D]`."""
        rows = (h, cos, signed_sin) if queries is None else (t.index_select(0, queries) for t in (h, cos, signed_sin))
        q = attn.query(*rows, self)  # q before k and v
        return (q, *attn.key_value(h, cos, signed_sin, self))

    def attend(
        self, layer: int, attn: AttentionModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """Layer `layer`'s attention: q `[M, H, D]` (the wanted rows, `queries`), k and v `[N, KVH, D]` (rotated keys
        and values of all N tokens) -> `[M, H * D]` before `o_proj`."""
        raise NotImplementedError(f"{type(self).__name__}.attend: a forward context must say how attention reads keys")

    def queries(self, layer: int) -> torch.Tensor | None:
        """`[M]` int64 ascending: the tokens (of the N) whose output layer `layer` computes; the others only lend
        their keys and values. None: all."""
        return None

    def replay(self, moe_ordinal: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(ids `[N, K]` int64, mask `[N]` bool) to force at the MoE layer of this ordinal (`TopKRouter.forward`);
        None: route natively."""
        return None

    def pointwise(self, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """fn(x) for an element-wise activation (silu, sigmoid); batch-invariant in invariant mode
        (`invariant_ops.invariant_pointwise`)."""
        return invariant_pointwise(fn, x) if self.invariant else fn(x)

    def add_linear(
        self,
        layer: int,
        op: str,
        residual: torch.Tensor,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """residual + x @ weight^T (+ bias) (`[M, out]`), recording the product as layer `layer`'s `op`."""
        out = self.linear(x, weight, bias)
        self.record(layer, op, out)
        return residual + out

    def add_mlp(self, layer: int, mlp: MLPModule, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """h + mlp(x) for a dense layer (h residual, x normed, `[M, hidden]`), recording mlp(x) as `mlp_out`."""
        out = mlp(x, self)
        self.record(layer, "mlp_out", out)
        return h + out

    def add_experts(
        self,
        layer: int,
        experts: ExpertsModule,
        h: torch.Tensor,
        x: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
    ) -> torch.Tensor:
        """h + experts(x): h the residual and x the normed input, `[M, hidden]`; ids and weights `[M, K]`. Records
        the experts' output as layer `layer`'s `mlp_out`."""
        out = invariant_experts(experts, x, ids, weights) if self.invariant else experts(x, ids, weights)
        self.record(layer, "mlp_out", out)
        return h + out

    def add_shared(
        self, layer: int, mlp: MLPModule, gate: torch.nn.Linear | None, h: torch.Tensor, x: torch.Tensor
    ) -> torch.Tensor:
        """h + the shared expert of x (`[M, hidden]`), scaled by sigmoid(gate(x)) when the family gates it; records
        it as layer `layer`'s `shared_out`."""
        out = mlp(x, self)
        if gate is not None:
            out = self.pointwise(torch.sigmoid, self.linear(x, gate.weight)) * out
        self.record(layer, "shared_out", out)
        return h + out

    def record(self, layer: int, op: str, value: torch.Tensor) -> None:
        if self.trace is not None:
            self.trace(layer, op, value)
