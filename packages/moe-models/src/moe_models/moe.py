"""The MoE block: a router, the routed experts and an optional shared expert; and the dense MLP."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from moe_models.config import MoEConfig
from moe_models.forward_context import ForwardContext
from moe_models.router import TopKRouter

ExpertsKernel = Literal["grouped", "padded", "looped"]
EXPERTS_KERNELS: tuple[ExpertsKernel, ...] = ("grouped", "padded", "looped")


class Experts(nn.Module):
    """All experts' weights as 3-D tensors (Hugging Face 5.x in-memory layout of Qwen-MoE).

    gate_up_proj: [E, 2 * I, hidden] (rows 0..I-1 gate, I..2I-1 up); down_proj: [E, hidden, I]; with `expert_bias`
    (GPT-OSS) gate_up_proj_bias [E, 2I] and down_proj_bias [E, hidden]. The activation is SwiGLU, or GPT-OSS's
    clamped variant (`activate`). `autograd_kernel` picks the path under autograd (see `forward`); it is not part of
    the weights.
    """

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        e, i, h = config.num_experts, config.moe_intermediate_size, config.hidden_size
        self.num_experts = e
        self.autograd_kernel: ExpertsKernel = "padded"
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))
        traits = config.traits
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(e, 2 * i)) if traits.expert_bias else None
        self.down_proj_bias = nn.Parameter(torch.zeros(e, h)) if traits.expert_bias else None
        self.clamped = traits.experts == "clamped_swiglu"
        self.alpha, self.limit = config.swiglu_alpha, config.swiglu_limit

    @property
    def plain(self) -> bool:
        """SwiGLU without biases (what the engine's fused expert kernels compute)."""
        return not self.clamped and self.gate_up_proj_bias is None

    def activate(self, gate_up: torch.Tensor) -> torch.Tensor:
        """[..., 2I] (gate then up) -> [..., I]: silu(gate) * up, or GPT-OSS's clamp(gate) * sigmoid(alpha *
        clamp(gate)) * (clamp(up) + 1)."""
        gate, up = gate_up.chunk(2, dim=-1)
        if not self.clamped:
            return F.silu(gate) * up
        gate = gate.clamp(max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        return gate * torch.sigmoid(gate * self.alpha) * (up + 1)

    def forward(self, h: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """h: [N, hidden]; ids, weights: [N, K]. Returns sum_k weights[:, k] * expert_{ids[:, k]}(h), [N, hidden].

        Token-expert pairs are sorted by expert and run as one grouped matmul per projection (CPU, no autograd).
        Otherwise (autograd, other devices) `autograd_kernel` decides: `grouped`, the same grouped matmuls with
        their backward (float32 and lower precisions: the fastest training step on CPU), `padded`, two batched
        matmuls over a zero-padded [E, max_count, hidden] buffer, or `looped`, a matmul pair per expert on its own
        rows (Hugging Face's loop; no padding; any dtype and device). All paths agree to float rounding (~1e-7), not
        bit for bit. Contributions are summed per token in ascending expert order, as Hugging Face does.
        """
        top_k = ids.shape[1]
        flat = ids.reshape(-1)  # [N*K]
        order = torch.argsort(flat, stable=True)  # pair indices grouped by expert
        sorted_experts = flat[order]
        counts = torch.bincount(flat, minlength=self.num_experts)  # [E]
        token = order // top_k  # [N*K] token of each sorted pair
        x = h.index_select(0, token)  # [N*K, hidden] expert-sorted
        if self._grouped_mm_applies(h) or self.autograd_kernel == "grouped":
            y = self._grouped(x, sorted_experts, counts)
        elif self.autograd_kernel == "looped":
            y = self._looped(x, counts)
        else:
            y = self._padded(x, sorted_experts, counts)
        pair_weights = weights.reshape(-1)[order, None].to(y.dtype)  # [N*K, 1] in expert-sorted order
        return torch.zeros_like(h).index_add_(0, token, (y * pair_weights).to(h.dtype))  # autocast: y may be bf16

    def _grouped_mm_applies(self, h: torch.Tensor) -> bool:
        needs_grad = torch.is_grad_enabled() and (h.requires_grad or self.gate_up_proj.requires_grad)
        return h.device.type == "cpu" and not needs_grad and hasattr(F, "grouped_mm")

    def _bias(self, bias: torch.Tensor | None, experts: torch.Tensor) -> torch.Tensor | float:
        """Each sorted row's expert bias (`[P, out]`), or 0 without biases."""
        return 0.0 if bias is None else bias.index_select(0, experts)

    def _grouped(self, x: torch.Tensor, sorted_experts: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x: [P, hidden] expert-sorted rows (expert of each: sorted_experts), counts: [E] rows per expert -> [P,
        hidden]."""
        offsets = torch.cumsum(counts, 0).to(torch.int32)  # [E] end row of each expert
        gate_up = F.grouped_mm(x, self.gate_up_proj.transpose(1, 2), offs=offsets)  # [P, 2I]
        if self.gate_up_proj_bias is not None:
            gate_up = gate_up + self._bias(self.gate_up_proj_bias, sorted_experts)
        y = F.grouped_mm(self.activate(gate_up), self.down_proj.transpose(1, 2), offs=offsets)
        return y if self.down_proj_bias is None else y + self._bias(self.down_proj_bias, sorted_experts)

    def _padded(self, x: torch.Tensor, sorted_experts: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Same contract as `_grouped`, via a zero-padded [E, capacity, hidden] buffer and torch.bmm."""
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.arange(x.shape[0], device=x.device) - starts[sorted_experts]  # position in its group
        capacity = int(counts.max()) if x.shape[0] > 0 else 0
        buf = x.new_zeros(self.num_experts, capacity, x.shape[-1]).index_put((sorted_experts, rank), x)
        gate_up = torch.bmm(buf, self.gate_up_proj.transpose(1, 2))  # [E, C, 2I]
        if self.gate_up_proj_bias is not None:
            gate_up = gate_up + self.gate_up_proj_bias[:, None]
        y = torch.bmm(self.activate(gate_up), self.down_proj.transpose(1, 2))  # [E, C, hidden]
        if self.down_proj_bias is not None:
            y = y + self.down_proj_bias[:, None]
        return y[sorted_experts, rank]

    def _looped(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Same contract as `_grouped`: the rows of expert e are x[start_e : start_e + counts[e]].

        The rows and weights are taken by `split` / `unbind`, whose backward is one `cat` / `stack`: indexing
        expert by expert would build, in the backward, a zero-filled copy of the whole input and of each weight
        per expert and sum them (a visible share of a long-tail training step's CPU time)."""
        sizes = counts.tolist()
        out = []
        for e, (rows, gate_up, down) in enumerate(
            zip(x.split(sizes), self.gate_up_proj.unbind(0), self.down_proj.unbind(0), strict=True)
        ):
            if rows.shape[0]:
                inner = rows @ gate_up.T  # [n, 2I]
                if self.gate_up_proj_bias is not None:
                    inner = inner + self.gate_up_proj_bias[e]
                y = self.activate(inner) @ down.T  # [n, hidden]
                out.append(y if self.down_proj_bias is None else y + self.down_proj_bias[e])
        return torch.cat(out) if out else x.new_zeros(0, x.shape[-1])


def set_experts_kernel(model: nn.Module, kernel: str) -> None:
    """Sets `autograd_kernel` of every `Experts` in `model` (see `Experts.forward`)."""
    if kernel not in EXPERTS_KERNELS:
        raise ValueError(f"experts kernel: expected one of {EXPERTS_KERNELS}, got {kernel!r}")
    for module in model.modules():
        if isinstance(module, Experts):
            module.autograd_kernel = kernel  # type: ignore[assignment]


class DenseMLP(nn.Module):
    """SwiGLU MLP: down(silu(gate(x)) * up(x)), `width` wide (default: config.intermediate_size)."""

    def __init__(self, config: MoEConfig, width: int | None = None) -> None:
        super().__init__()
        h, i = config.hidden_size, width or config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        gate, up = ctx.linear(x, self.gate_proj.weight), ctx.linear(x, self.up_proj.weight)
        return ctx.linear(ctx.pointwise(F.silu, gate) * up, self.down_proj.weight)


class SparseMoeBlock(nn.Module):
    """Router, routed experts and, where the family has one, a shared expert (`shared_expert`, scaled by
    sigmoid(`shared_expert_gate`) for Qwen2-MoE) that every token runs."""

    def __init__(self, config: MoEConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.gate = TopKRouter(config)
        self.experts = Experts(config)
        width = config.shared_expert_intermediate_size
        self.shared_expert = DenseMLP(config, width) if width else None
        gated = width and config.traits.shared_expert_gate
        self.shared_expert_gate = nn.Linear(config.hidden_size, 1, bias=False) if gated else None

    def forward(
        self,
        x: torch.Tensor,
        h: torch.Tensor,
        ctx: ForwardContext,
        replay_ids: torch.Tensor | None = None,
        replay_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [M, hidden] normed input, h: [M, hidden] residual -> (h + moe(x) [M, hidden], expert ids [M, K])."""
        weights, ids = self.gate(x, ctx, replay_ids, replay_mask, self.layer_idx)
        h = ctx.add_experts(self.layer_idx, self.experts, h, x, ids, weights)
        if self.shared_expert is not None:
            h = ctx.add_shared(self.layer_idx, self.shared_expert, self.shared_expert_gate, h, x)
        return h, ids
