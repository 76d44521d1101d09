"""Feed-forward blocks: the softmax top-k router, the batched experts, the sparse block and the dense MLP."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from moe_models.config import MoEConfig
from moe_models.forward_context import ForwardContext

ExpertsKernel = Literal["padded", "looped"]
EXPERTS_KERNELS: tuple[ExpertsKernel, ...] = ("padded", "looped")


class TopKRouter(nn.Module):
    """Softmax over expert logits (float32; float64 for float64 input), top-k, optional renormalisation of the k
    weights."""

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.weight = nn.Parameter(torch.zeros(config.num_experts, config.hidden_size))

    def forward(
        self,
        h: torch.Tensor,
        ctx: ForwardContext | None = None,
        replay_ids: torch.Tensor | None = None,
        replay_mask: torch.Tensor | None = None,
        layer: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """h: [N, hidden]; replay_ids: [N, K] int64 used where replay_mask [N] is True; `ctx` runs the matmul and
        sees the logits and the choice (as layer `layer`'s `router_logits` and sorted `topk`).

        Returns (weights [N, K] in h's dtype, expert ids [N, K] int64). Weights are always gathered from the
        current probabilities at the chosen ids, so under replay the router still receives gradients.
        """
        logits = F.linear(h, self.weight) if ctx is None else ctx.linear(h, self.weight)  # [N, E]
        probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        ids = torch.topk(probs, self.top_k, dim=-1).indices  # [N, K]
        if replay_ids is not None:
            if replay_mask is None:
                raise ValueError("TopKRouter: replay_ids given without replay_mask")
            ids = torch.where(replay_mask[:, None], replay_ids, ids)
        if ctx is not None and ctx.trace is not None:
            ctx.record(layer, "router_logits", logits)
            ctx.record(layer, "topk", ids.sort(dim=-1).values)
        weights = probs.gather(1, ids)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(h.dtype), ids


class Experts(nn.Module):
    """All experts' weights as 3-D tensors (Hugging Face 5.x in-memory layout).

    gate_up_proj: [E, 2 * I, hidden] (rows 0..I-1 gate, I..2I-1 up); down_proj: [E, hidden, I].
    `autograd_kernel` picks the path under autograd (see `forward`); it is not part of the weights.
    """

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        e, i, h = config.num_experts, config.moe_intermediate_size, config.hidden_size
        self.num_experts = e
        self.autograd_kernel: ExpertsKernel = "padded"
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))

    def forward(self, h: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """h: [N, hidden]; ids, weights: [N, K]. Returns sum_k weights[:, k] * expert_{ids[:, k]}(h), [N, hidden].

        Token-expert pairs are sorted by expert and run as one grouped matmul per projection (CPU, no autograd).
        Otherwise (autograd, other devices) `autograd_kernel` decides: `padded`, two batched matmuls over a
        zero-padded [E, max_count, hidden] buffer, or `looped`, a matmul pair per expert on its own rows (Hugging
        Face's loop; no padding, so faster training steps on CPU, the more so the more uneven the routing). All
        paths agree to float rounding (~1e-7), not bit for bit. Contributions are summed per token in ascending
        expert order, as Hugging Face does.
        """
        top_k = ids.shape[1]
        flat = ids.reshape(-1)  # [N*K]
        order = torch.argsort(flat, stable=True)  # pair indices grouped by expert
        sorted_experts = flat[order]
        counts = torch.bincount(flat, minlength=self.num_experts)  # [E]
        token = order // top_k  # [N*K] token of each sorted pair
        x = h.index_select(0, token)  # [N*K, hidden] expert-sorted
        if self._grouped_mm_applies(h):
            y = self._grouped(x, counts)
        elif self.autograd_kernel == "looped":
            y = self._looped(x, counts)
        else:
            y = self._padded(x, sorted_experts, counts)
        pair_weights = weights.reshape(-1)[order, None].to(y.dtype)  # [N*K, 1] in expert-sorted order
        return torch.zeros_like(h).index_add_(0, token, (y * pair_weights).to(h.dtype))  # autocast: y may be bf16

    def _grouped_mm_applies(self, h: torch.Tensor) -> bool:
        needs_grad = torch.is_grad_enabled() and (h.requires_grad or self.gate_up_proj.requires_grad)
        return h.device.type == "cpu" and not needs_grad and hasattr(F, "grouped_mm")

    def _grouped(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x: [P, hidden] expert-sorted rows, counts: [E] rows per expert -> [P, hidden]."""
        offsets = torch.cumsum(counts, 0).to(torch.int32)  # [E] end row of each expert
        gate_up = F.grouped_mm(x, self.gate_up_proj.transpose(1, 2), offs=offsets)  # [P, 2I]
        gate, up = gate_up.chunk(2, dim=-1)
        return F.grouped_mm(F.silu(gate) * up, self.down_proj.transpose(1, 2), offs=offsets)

    def _padded(self, x: torch.Tensor, sorted_experts: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Same contract as `_grouped`, via a zero-padded [E, capacity, hidden] buffer and torch.bmm."""
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.arange(x.shape[0], device=x.device) - starts[sorted_experts]  # position in its group
        capacity = int(counts.max()) if x.shape[0] > 0 else 0
        buf = x.new_zeros(self.num_experts, capacity, x.shape[-1]).index_put((sorted_experts, rank), x)
        gate_up = torch.bmm(buf, self.gate_up_proj.transpose(1, 2))  # [E, C, 2I]
        gate, up = gate_up.chunk(2, dim=-1)
        y = torch.bmm(F.silu(gate) * up, self.down_proj.transpose(1, 2))  # [E, C, hidden]
        return y[sorted_experts, rank]

    def _looped(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Same contract as `_grouped`: the rows of expert e are x[start_e : start_e + counts[e]].

        The rows and weights are taken by `split` / `unbind`, whose backward is one `cat` / `stack`: indexing
        expert by expert would build, in the backward, a zero-filled copy of the whole input and of each weight
        per expert and sum them (a visible share of a long-tail training step's CPU time)."""
        sizes = counts.tolist()
        out = []
        per_expert = zip(x.split(sizes), self.gate_up_proj.unbind(0), self.down_proj.unbind(0), strict=True)
        for rows, gate_up, down in per_expert:
            if rows.shape[0]:
                gate, up = (rows @ gate_up.T).chunk(2, dim=-1)  # [n, I] each
                out.append((F.silu(gate) * up) @ down.T)  # [n, hidden]
        return torch.cat(out) if out else x.new_zeros(0, x.shape[-1])


def set_experts_kernel(model: nn.Module, kernel: str) -> None:
    """Sets `autograd_kernel` of every `Experts` in `model` (see `Experts.forward`)."""
    if kernel not in EXPERTS_KERNELS:
        raise ValueError(f"experts kernel: expected one of {EXPERTS_KERNELS}, got {kernel!r}")
    for module in model.modules():
        if isinstance(module, Experts):
            module.autograd_kernel = kernel  # type: ignore[assignment]


class SparseMoeBlock(nn.Module):
    def __init__(self, config: MoEConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.gate = TopKRouter(config)
        self.experts = Experts(config)

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
        return ctx.add_experts(self.layer_idx, self.experts, h, x, ids, weights), ids


class DenseMLP(nn.Module):
    """SwiGLU MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        gate, up = ctx.linear(x, self.gate_proj.weight), ctx.linear(x, self.up_proj.weight)
        return ctx.linear(F.silu(gate) * up, self.down_proj.weight)
