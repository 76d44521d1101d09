"""Gradient reduction and the global grad-norm clip for the Megatron backend, by hand over torch.distributed (no
Megatron `DistributedDataParallel` or optimiser: both allocate CUDA buffers).

Every rank trains on its share of a mini-batch's rows with the loss `local_sum / global_count`, so the batch's
gradient is the sum over ranks:
- a dense weight (every weight but the experts') is replicated on every rank: its gradients are summed over all
  ranks (tensor parallel 1, so the data-parallel group is the world);
- an expert weight lives on one rank of each expert-parallel group; Megatron's all-gather dispatcher already sums
  the gradient over every token of that group (its backward is a reduce-scatter), so it is summed only over the
  expert-data-parallel group (the ranks holding the same experts; none when `expert_parallel == ranks`).
The global norm counts each dense weight once and each expert once: `sqrt(dense^2 + sum over the expert-parallel
group of local experts^2)`, the same number on every rank. The clip is `torch.nn.utils.clip_grad_norm_`'s:
`coef = min(1, max_norm / (norm + 1e-6))`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

EXPERT_MARK = ".local_experts."


def is_expert(name: str) -> bool:
    return EXPERT_MARK in name


def fill_missing_grads(params: Sequence[torch.nn.Parameter]) -> None:
    """A weight without a gradient (an expert no token reached) gets zeros, as our fused expert tensor does: AdamW
    then steps every weight every time, and every rank's collectives have the same tensors."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)


def sum_grads(params: Sequence[torch.nn.Parameter], group: dist.ProcessGroup | None) -> None:
    """Sums the gradients of `params` over `group` in one flat all-reduce (None: the default group)."""
    if not params:
        return
    grads = [p.grad for p in params]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    for g, reduced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        g.copy_(reduced)


def squared_norm(params: Sequence[torch.nn.Parameter], device: torch.device) -> torch.Tensor:
    """Sum of squared gradient entries of `params`, a float32 0-dim tensor (zero without params)."""
    total = torch.zeros((), dtype=torch.float32, device=device)
    for p in params:
        total += p.grad.detach().float().pow(2).sum()
    return total


def clip_(params: Sequence[torch.nn.Parameter], norm: torch.Tensor, max_norm: float) -> None:
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for p in params:
        p.grad.detach().mul_(coef.to(p.grad.dtype))
