"""Next-token log-probs straight from the last hidden states and the output head, a chunk of tokens at a time,
forward and backward: the `[tokens, vocab]` logits exist one chunk at a time (`HEAD_CHUNK_ELEMENTS` logits), never
for a whole batch, so a 151k-token vocabulary costs O(chunk x vocab) memory whatever the batch.

A *cell* is one scored position of a batch: it reads the hidden state of one computed token (`token`, a row of
`h`; several cells may read one token, as a GRPO group's rows read their shared prompt's last position) and scores
its own next token (`target`), and optionally K other ids (`at_ids`, a teacher's top-k). Per cell:

    z        = linear(h[token], weight) / T    (float32, or float64 for float64 weights; `weight`: the scored ids)
    log_prob = z[target] - logsumexp(z)        (`log_softmax(z)[target]` with `log_softmax`)
    at[k]    = z[at_ids[k]] - logsumexp(z)
    entropy  = logsumexp(z) - sum(softmax(z) * z)          (no gradient; only when asked)
    top-k    = the k largest z[i] - logsumexp(z), their ids  (no gradient; only when asked: a teacher's scores)

The backward recomputes each chunk's logits and writes d/dz = onehot(target) g - softmax(z) g (plus the at terms)
into the gradients of `h` and `weight` chunk by chunk. A chunk's matmul and its row-wise reductions are those of a
whole-batch computation on the same rows, so a batch that fits one chunk gets the same numbers, bit for bit: with the
default formula those of `z.gather(target) - logsumexp(z)` under autograd, with `log_softmax` those of
`log_softmax(z).gather(target)` (the backward is PyTorch's own log-softmax backward). The native sampler reports
`log_softmax(z)[token]`, so true on-policy mode scores with that formula. Under autocast the forward's matmul dtype
is used again in the backward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

HEAD_CHUNK_ELEMENTS = 1 << 24  # logits per chunk: 64 MiB in float32

Linear = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class HeadLogProbs:
    """Per cell `[C]` float32 (float64 for float64 weights): the target's log-prob (with gradient), the at-ids'
    log-probs `[C, K]` (with gradient; None without at-ids), the entropy (no gradient; None unless asked) and the
    `top_k` most likely ids `[C, k]` int64 with their log-probs `[C, k]` (no gradient; None unless asked)."""

    log_probs: torch.Tensor
    at: torch.Tensor | None
    entropy: torch.Tensor | None
    top_ids: torch.Tensor | None = None
    top_log_probs: torch.Tensor | None = None


@dataclass(frozen=True)
class _Plan:
    """Cells sorted by the token they read (stable: a token's cells stay in batch order) and the token chunks."""

    order: torch.Tensor | None  # [C] cell indices in token order; None: cell i reads token i (no sharing)
    sorted_tokens: torch.Tensor  # [C]
    chunks: list[tuple[int, int, int, int]]  # (token start, token end, first cell, end cell) in sorted order


def _plan(token: torch.Tensor, num_tokens: int, chunk_rows: int) -> _Plan:
    cells = int(token.numel())
    identity = cells == num_tokens and bool((token == torch.arange(cells, device=token.device)).all())
    if identity:
        order, sorted_tokens = None, token
    else:
        sorted_tokens, order = torch.sort(token, stable=True)
    bounds = [*range(0, num_tokens, chunk_rows), num_tokens]
    edges = torch.searchsorted(sorted_tokens, torch.tensor(bounds, device=token.device)).tolist()
    chunks = [(bounds[i], bounds[i + 1], edges[i], edges[i + 1]) for i in range(len(bounds) - 1)]
    return _Plan(order, sorted_tokens, [c for c in chunks if c[2] < c[3]])


def _cells(plan: _Plan, a: int, b: int) -> torch.Tensor | slice:
    return slice(a, b) if plan.order is None else plan.order[a:b]


class _ChunkedHead(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        h: torch.Tensor,
        weight: torch.Tensor,
        token: torch.Tensor,
        target: torch.Tensor,
        at_ids: torch.Tensor | None,
        temperature: float,
        linear: Linear,
        log_softmax: bool,
        with_entropy: bool,
        top_k: int,
        chunk_rows: int,
    ) -> tuple[torch.Tensor, ...]:
        device = h.device
        cells = int(token.numel())
        plan = _plan(token, h.shape[0], chunk_rows)
        dtype = _score_dtype(h.dtype)
        log_probs = torch.zeros(cells, dtype=dtype, device=device)
        lse = torch.zeros(cells, dtype=dtype, device=device)
        at = torch.zeros(cells, at_ids.shape[1] if at_ids is not None else 0, dtype=dtype, device=device)
        entropy = torch.zeros(cells if with_entropy else 0, dtype=dtype, device=device)
        top_ids = torch.zeros(cells, top_k, dtype=torch.int64, device=device)
        top_lp = torch.zeros(cells, top_k, dtype=dtype, device=device)
        z_dtype = dtype
        for start, end, a, b in plan.chunks:
            rows = _cells(plan, a, b)
            z, z_dtype = _logits(h, weight, start, end, plan, a, b, temperature, linear)  # [c, V]
            norm = torch.logsumexp(z, dim=-1)  # [c]
            lse[rows] = norm
            picked = target[rows, None]
            if log_softmax:
                log_probs[rows] = z.log_softmax(dim=-1).gather(-1, picked).squeeze(1)
            else:
                log_probs[rows] = (z.gather(-1, picked) - norm[:, None]).squeeze(1)
            if at_ids is not None:
                at[rows] = z.gather(-1, at_ids[rows]) - norm[:, None]
            if with_entropy:
                entropy[rows] = norm - (z - norm[:, None]).exp().mul(z).sum(dim=-1)
            if top_k:
                best = z.topk(top_k, dim=-1)
                top_ids[rows], top_lp[rows] = best.indices, best.values - norm[:, None]
        ctx.save_for_backward(h, weight, token, target, at_ids, lse)
        ctx.plan, ctx.temperature, ctx.linear, ctx.z_dtype = plan, temperature, linear, z_dtype
        ctx.log_softmax = log_softmax
        ctx.autocast = _autocast_state(device)
        ctx.mark_non_differentiable(entropy, top_ids, top_lp)
        return log_probs, at, entropy, top_ids, top_lp

    @staticmethod
    def backward(ctx: Any, g_lp: torch.Tensor, g_at: torch.Tensor, *_no_grad: torch.Tensor) -> tuple[Any, ...]:
        h, weight, _token, target, at_ids, lse = ctx.saved_tensors
        plan: _Plan = ctx.plan
        grad_h = torch.zeros_like(h) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        with _autocast_restored(h.device, ctx.autocast):
            for start, end, a, b in plan.chunks:
                rows = _cells(plan, a, b)
                z, _ = _logits(h, weight, start, end, plan, a, b, ctx.temperature, ctx.linear)
                at_rows = None if at_ids is None else (at_ids[rows], g_at[rows])
                if ctx.log_softmax:
                    g = _log_softmax_grad(z, target[rows], g_lp[rows], at_rows)
                else:
                    g = _logsumexp_grad(z, lse[rows], target[rows], g_lp[rows], at_rows)
                if ctx.temperature != 1.0:
                    g = g / ctx.temperature
                g = _per_token(g.to(ctx.z_dtype), plan, start, end, a, b)  # [end - start, V]
                _accumulate(g, h[start:end], weight, grad_h, grad_w, start, ctx.autocast)
        return grad_h, grad_w, None, None, None, None, None, None, None, None, None


def _logsumexp_grad(
    z: torch.Tensor,
    lse: torch.Tensor,
    target: torch.Tensor,
    g_lp: torch.Tensor,
    at: tuple[torch.Tensor, torch.Tensor] | None,
) -> torch.Tensor:
    """d/dz of `z[target] - logsumexp(z)` (and the at terms) weighted by their gradients, as autograd computes it."""
    scale = g_lp if at is None else g_lp + at[1].sum(dim=-1)
    g = (z - lse[:, None]).exp() * -scale[:, None]  # [c, V] the logsumexp term
    g.scatter_add_(1, target[:, None], g_lp[:, None])
    if at is not None:
        g.scatter_add_(1, at[0], at[1])
    return g


def _log_softmax_grad(
    z: torch.Tensor, target: torch.Tensor, g_lp: torch.Tensor, at: tuple[torch.Tensor, torch.Tensor] | None
) -> torch.Tensor:
    """d/dz of `log_softmax(z)[target]` (and the at terms) weighted by their gradients: PyTorch's own log-softmax
    backward, so the numbers are those of `log_softmax(z).gather(...)` and `cross_entropy` under autograd."""
    out = z.log_softmax(dim=-1)
    grad_out = torch.zeros_like(z).scatter_(1, target[:, None], g_lp[:, None])
    if at is not None:
        grad_out.scatter_add_(1, at[0], at[1])
    return torch.ops.aten._log_softmax_backward_data(grad_out, out, 1, z.dtype)


def _score_dtype(dtype: torch.dtype) -> torch.dtype:
    """The logits' arithmetic: float32, or float64 for float64 weights."""
    return torch.promote_types(dtype, torch.float32)


def _logits(
    h: torch.Tensor,
    weight: torch.Tensor,
    start: int,
    end: int,
    plan: _Plan,
    a: int,
    b: int,
    temperature: float,
    linear: Linear,
) -> tuple[torch.Tensor, torch.dtype]:
    """`[b - a, V]` logits / T (float32, or float64) of the cells a..b (sorted order), which read tokens
    start..end, and the matmul's own dtype."""
    z = linear(h[start:end], weight)  # [end - start, V]
    dtype = z.dtype
    if plan.order is not None:
        z = z.index_select(0, plan.sorted_tokens[a:b] - start)
    z = z.to(_score_dtype(dtype))
    if temperature != 1.0:
        z = z / temperature
    return z, dtype


def _per_token(g: torch.Tensor, plan: _Plan, start: int, end: int, a: int, b: int) -> torch.Tensor:
    """Cells' gradients `[b - a, V]` summed per token they read -> `[end - start, V]`."""
    if plan.order is None:
        return g
    out = g.new_zeros(end - start, g.shape[1])
    return out.index_add_(0, plan.sorted_tokens[a:b] - start, g)


def _accumulate(
    g: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor,
    grad_h: torch.Tensor | None,
    grad_w: torch.Tensor | None,
    start: int,
    autocast: torch.dtype | None,
) -> None:
    """grad_h[start:] = g @ weight, grad_w += g^T @ h, in the forward matmul's dtype."""
    dtype = autocast or g.dtype
    g = g.to(dtype)
    if grad_h is not None:
        grad_h[start : start + g.shape[0]] = g.mm(weight.to(dtype)).to(grad_h.dtype)
    if grad_w is not None:
        grad_w += g.t().mm(h.to(dtype)).to(grad_w.dtype)


def _autocast_state(device: torch.device) -> torch.dtype | None:
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None


def _autocast_restored(device: torch.device, dtype: torch.dtype | None) -> torch.autocast:
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


def head_log_probs(
    h: torch.Tensor,
    weight: torch.Tensor,
    token: torch.Tensor,
    target: torch.Tensor,
    *,
    temperature: float = 1.0,
    at_ids: torch.Tensor | None = None,
    linear: Linear = F.linear,
    log_softmax: bool = False,
    with_entropy: bool = False,
    top_k: int = 0,
    chunk_elements: int = HEAD_CHUNK_ELEMENTS,
) -> HeadLogProbs:
    """h `[N, hidden]` (the final-normed hidden states of the computed tokens), weight `[V, hidden]` (the head's
    rows of the scored vocabulary), token `[C]` int64 (the row of `h` each cell reads), target `[C]` int64 (ids in
    `[0, V)`), at_ids `[C, K]` int64 or None. `linear(x, weight)` computes the logits (a batch-invariant one in true
    on-policy mode); `log_softmax` scores the target with `log_softmax(z)[target]`, the native sampler's own
    formula (so that a recomputed log-prob equals the sampled one bit for bit)."""
    if not temperature > 0:
        raise ValueError(f"temperature: got {temperature}, expected > 0 (greedy has no log-probs)")
    if token.shape != target.shape or token.dim() != 1:
        raise ValueError(f"token, target: expected two [C] tensors, got {tuple(token.shape)}, {tuple(target.shape)}")
    if at_ids is not None and (at_ids.dim() != 2 or at_ids.shape[0] != token.shape[0]):
        raise ValueError(f"at_ids: expected [C, K] with C = {token.shape[0]}, got {tuple(at_ids.shape)}")
    if not 0 <= top_k <= weight.shape[0]:
        raise ValueError(f"top_k: got {top_k}, expected 0..{weight.shape[0]} (the scored vocabulary)")
    rows = max(1, chunk_elements // max(1, weight.shape[0]))
    log_probs, at, entropy, top_ids, top_lp = _ChunkedHead.apply(
        h, weight, token, target, at_ids, temperature, linear, log_softmax, with_entropy, top_k, rows
    )
    return HeadLogProbs(
        log_probs,
        at if at_ids is not None else None,
        entropy if with_entropy else None,
        top_ids if top_k else None,
        top_lp if top_k else None,
    )
