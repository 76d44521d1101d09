"""Next-token log-probs straight from the last hidden states and the output head, a chunk of tokens at a time,
forward and backward: the `[tokens, vocab]` logits exist one chunk at a time (`HEAD_CHUNK_ELEMENTS` logits), never
for a whole batch, so a 151k-token vocabulary costs O(chunk x vocab) memory whatever the batch.

A *cell* is one scored position of a batch: it reads the hidden state of one computed token (`token`, a row of
`h`; several cells may read one token, as a GRPO group's rows read their shared prompt's last position) and scores
its own next token (`target`), and optionally K other ids (`at_ids`, a teacher's top-k). Per cell:

    z        = linear(h[token], weight[:vocab]) / T    (float32, or float64 for float64 weights)
    log_prob = z[target] - logsumexp(z)        (`log_softmax(z)[target]` with `log_softmax`)
    at[k]    = z[at_ids[k]] - logsumexp(z)
    entropy  = logsumexp(z) - sum(softmax(z) * z)          (no gradient; only when asked, filled by the backward)
    top-k    = the k largest z[i] - logsumexp(z), their ids  (no gradient; only when asked: a teacher's scores)

Work is per token, not per cell: the logits, their logsumexp and softmax are computed once for a token however many
cells read it. The backward recomputes each chunk's logits and writes d/dz = onehot(target) g - softmax(z) g (plus
the at terms) into the gradients of `h` and `weight` chunk by chunk; a token's row is its first cell's gradient, and
its other cells' gradients are added after it in cell order. A chunk's matmul and its row-wise reductions are those
of a whole-batch computation on the same rows, so a batch that fits one chunk gets the same numbers, bit for bit:
with the default formula those of `z.gather(target) - logsumexp(z)` under autograd (the cells' gradients summed per
token in cell order), with `log_softmax` those of `log_softmax(z).gather(target)` (the backward is PyTorch's own
log-softmax backward). The native sampler reports `log_softmax(z)[token]`, so true on-policy mode scores with that
formula. Under autocast the forward's matmul dtype is used again in the backward. The entropy is a by-product of the
probabilities the backward computes anyway: read it after `backward()` (a forward alone leaves it 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

HEAD_CHUNK_ELEMENTS = 1 << 25  # logits per chunk: 128 MiB in float32 (fewer passes over a small-hidden head than 64)

Linear = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class HeadLogProbs:
    """Per cell `[C]` float32 (float64 for float64 weights): the target's log-prob (with gradient), the at-ids'
    log-probs `[C, K]` (with gradient; None without at-ids), the entropy (no gradient; None unless asked; filled by
    the backward pass) and the `top_k` most likely ids `[C, k]` int64 with their log-probs `[C, k]` (no gradient;
    None unless asked)."""

    log_probs: torch.Tensor
    at: torch.Tensor | None
    entropy: torch.Tensor | None
    top_ids: torch.Tensor | None = None
    top_log_probs: torch.Tensor | None = None


@dataclass(frozen=True)
class _Chunk:
    """Tokens `start..end` and the cells that read them: `cells` (their indices, in token order, stable), `local`
    (the token each reads, from `start`), and which of them is the first cell of its token (`first`)."""

    start: int
    end: int
    cells: torch.Tensor
    local: torch.Tensor
    first: torch.Tensor

    @property
    def extra(self) -> bool:
        """Whether some token of the chunk is read by more than one cell."""
        return bool(self.first.numel()) and not bool(self.first.all())


def _chunks(token: torch.Tensor, num_tokens: int, chunk_rows: int) -> list[_Chunk]:
    sorted_tokens, order = torch.sort(token, stable=True)
    bounds = [*range(0, num_tokens, chunk_rows), num_tokens]
    edges = torch.searchsorted(sorted_tokens, torch.tensor(bounds, device=token.device)).tolist()
    first = torch.ones_like(sorted_tokens, dtype=torch.bool)
    first[1:] = sorted_tokens[1:] != sorted_tokens[:-1]
    return [
        _Chunk(bounds[i], bounds[i + 1], order[a:b], sorted_tokens[a:b] - bounds[i], first[a:b])
        for i, (a, b) in enumerate(itertools.pairwise(edges))
        if a < b
    ]


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
        vocab: int,
        entropy_layout: tuple[int, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, ...]:
        device, cells = h.device, int(token.numel())
        chunks = _chunks(token, h.shape[0], chunk_rows)
        dtype = _score_dtype(h.dtype)
        log_probs = torch.zeros(cells, dtype=dtype, device=device)
        lse = torch.zeros(h.shape[0], dtype=dtype, device=device)  # per token
        at = torch.zeros(cells, at_ids.shape[1] if at_ids is not None else 0, dtype=dtype, device=device)
        slots = cells if entropy_layout is None else entropy_layout[0]
        entropy = torch.zeros(slots if with_entropy else 0, dtype=dtype, device=device)
        ctx.entropy_index = None if entropy_layout is None else entropy_layout[1]
        top_ids = torch.zeros(cells, top_k, dtype=torch.int64, device=device)
        top_lp = torch.zeros(cells, top_k, dtype=dtype, device=device)
        z_dtype = dtype
        for c in chunks:
            z, z_dtype = _logits(h, weight[:vocab], c.start, c.end, temperature, linear)  # [tokens, V]
            norm = torch.logsumexp(z, dim=-1)  # [tokens]
            lse[c.start : c.end] = norm
            picked = target[c.cells]
            if log_softmax:
                log_probs[c.cells] = z.log_softmax(dim=-1)[c.local, picked]
            else:
                log_probs[c.cells] = z[c.local, picked] - norm[c.local]
            if at_ids is not None:
                at[c.cells] = z[c.local[:, None], at_ids[c.cells]] - norm[c.local, None]
            if top_k:
                best = z.topk(top_k, dim=-1)
                top_ids[c.cells], top_lp[c.cells] = best.indices[c.local], (best.values - norm[:, None])[c.local]
        ctx.save_for_backward(h, weight, target, at_ids, lse)
        ctx.chunks, ctx.temperature, ctx.linear, ctx.z_dtype = chunks, temperature, linear, z_dtype
        ctx.log_softmax, ctx.entropy, ctx.vocab = log_softmax, entropy if with_entropy else None, vocab
        ctx.autocast = _autocast_state(device)
        ctx.mark_non_differentiable(entropy, top_ids, top_lp)
        return log_probs, at, entropy, top_ids, top_lp

    @staticmethod
    def backward(ctx: Any, g_lp: torch.Tensor, g_at: torch.Tensor, *_no_grad: torch.Tensor) -> tuple[Any, ...]:
        h, weight, target, at_ids, lse = ctx.saved_tensors
        grad_h = torch.zeros_like(h) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None  # the rows past `vocab` stay 0
        scored = weight[: ctx.vocab]
        with _autocast_restored(h.device, ctx.autocast):
            for c in ctx.chunks:
                z, _ = _logits(h, scored, c.start, c.end, ctx.temperature, ctx.linear)
                at = None if at_ids is None else (at_ids[c.cells], g_at[c.cells])
                args = (z, c, target[c.cells], g_lp[c.cells], at)
                g = (
                    _log_softmax_grad(*args, ctx)
                    if ctx.log_softmax
                    else _logsumexp_grad(*args, lse[c.start : c.end], ctx)
                )
                if ctx.temperature != 1.0:
                    g.div_(ctx.temperature)
                rows_w = None if grad_w is None else grad_w[: ctx.vocab]
                _accumulate(g.to(ctx.z_dtype), h[c.start : c.end], scored, grad_h, rows_w, c.start, ctx.autocast)
        return grad_h, grad_w, None, None, None, None, None, None, None, None, None, None, None


def _logsumexp_grad(
    z: torch.Tensor,
    c: _Chunk,
    target: torch.Tensor,
    g_lp: torch.Tensor,
    at: tuple[torch.Tensor, torch.Tensor] | None,
    lse: torch.Tensor,
    ctx: Any,
) -> torch.Tensor:
    """`[tokens, V]`: d/dz of every cell's `z[target] - logsumexp(z)` (and its at terms) weighted by its gradient, as
    autograd computes it, summed per token in cell order; with the entropy asked for, the chunk's cells' entropies
    from the same probabilities."""
    scale = g_lp if at is None else g_lp + at[1].sum(dim=-1)  # [cells]
    g = (z - lse[:, None]).exp_()  # [tokens, V] the softmax
    if ctx.entropy is not None:
        ctx.entropy[_slots(ctx, c)] = (lse - torch.bmm(g[:, None], z[:, :, None]).flatten())[c.local]
    extra = None
    if c.extra:  # tokens read by several cells: their other cells' rows, from the same softmax
        keep = ~c.first
        extra = _cell_grad(g[c.local[keep]], -scale[keep], target[keep], g_lp[keep], _rows(at, keep))
    first = c.first
    row_scale = torch.zeros_like(lse).index_put_((c.local[first],), -scale[first])
    g.mul_(row_scale[:, None])
    g.index_put_((c.local[first], target[first]), g_lp[first], accumulate=True)
    if at is not None:
        g.index_put_((c.local[first, None], at[0][first]), at[1][first], accumulate=True)
    if extra is not None:
        g.index_add_(0, c.local[~first], extra)
    return g


def _slots(ctx: Any, c: _Chunk) -> torch.Tensor:
    """Where the chunk's cells' entropies go in the entropy tensor (`head_log_probs`'s `entropy_layout`)."""
    return c.cells if ctx.entropy_index is None else ctx.entropy_index[c.cells]


def _cell_grad(
    p: torch.Tensor, neg_scale: torch.Tensor, target: torch.Tensor, g_lp: torch.Tensor, at: Any
) -> torch.Tensor:
    """`[cells, V]` d/dz of cells whose softmax rows are `p` (a copy)."""
    g = p * neg_scale[:, None]
    g.scatter_add_(1, target[:, None], g_lp[:, None])
    if at is not None:
        g.scatter_add_(1, at[0], at[1])
    return g


def _rows(at: tuple[torch.Tensor, torch.Tensor] | None, keep: torch.Tensor) -> Any:
    return None if at is None else (at[0][keep], at[1][keep])


def _log_softmax_grad(
    z: torch.Tensor,
    c: _Chunk,
    target: torch.Tensor,
    g_lp: torch.Tensor,
    at: tuple[torch.Tensor, torch.Tensor] | None,
    ctx: Any,
) -> torch.Tensor:
    """`[tokens, V]`: d/dz of every cell's `log_softmax(z)[target]` (and its at terms) weighted by its gradient:
    PyTorch's own log-softmax backward, per cell, summed per token in cell order (and the cells' entropies)."""
    rows = z.log_softmax(dim=-1)  # [tokens, V]
    if ctx.entropy is not None:
        ctx.entropy[_slots(ctx, c)] = -torch.bmm(rows.exp()[:, None], rows[:, :, None]).flatten()[c.local]
    out = rows[c.local]  # [cells, V]
    grad_out = torch.zeros_like(out).scatter_(1, target[:, None], g_lp[:, None])
    if at is not None:
        grad_out.scatter_add_(1, at[0], at[1])
    cell_grads = torch.ops.aten._log_softmax_backward_data(grad_out, out, 1, z.dtype)
    return torch.zeros_like(z).index_add_(0, c.local, cell_grads)


def _score_dtype(dtype: torch.dtype) -> torch.dtype:
    """The logits' arithmetic: float32, or float64 for float64 weights."""
    return torch.promote_types(dtype, torch.float32)


def _logits(
    h: torch.Tensor, weight: torch.Tensor, start: int, end: int, temperature: float, linear: Linear
) -> tuple[torch.Tensor, torch.dtype]:
    """`[end - start, V]` logits / T (float32, or float64) of tokens start..end, and the matmul's own dtype."""
    z = linear(h[start:end], weight)  # [end - start, V]
    dtype = z.dtype
    z = z.to(_score_dtype(dtype))
    if temperature != 1.0:
        z = z.div_(temperature)
    return z, dtype


def _accumulate(
    g: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor,
    grad_h: torch.Tensor | None,
    grad_w: torch.Tensor | None,
    start: int,
    autocast: torch.dtype | None,
) -> None:
    """grad_h[start:] = g @ weight, grad_w += g^T @ h (accumulated in place: one read and write of `grad_w` a chunk),
    in the forward matmul's dtype."""
    dtype = autocast or g.dtype
    g = g.to(dtype)
    if grad_h is not None:
        rows = grad_h[start : start + g.shape[0]]
        if dtype == grad_h.dtype:
            torch.mm(g, weight, out=rows)
        else:
            rows.copy_(g.mm(weight.to(dtype)))
    if grad_w is not None:
        if dtype == grad_w.dtype:
            grad_w.addmm_(g.t(), h)
        else:
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
    vocab: int | None = None,
    chunk_elements: int = HEAD_CHUNK_ELEMENTS,
    entropy_layout: tuple[int, torch.Tensor] | None = None,
) -> HeadLogProbs:
    """h `[N, hidden]` (the final-normed hidden states of the computed tokens), weight `[R, hidden]` (the head),
    `vocab` V <= R: its first rows that are tokens, the only ones scored (None: all; the others get a zero gradient),
    token `[C]` int64 (the row of `h` each cell reads), target `[C]` int64 (ids in `[0, V)`), at_ids `[C, K]` int64
    or None. `linear(x, weight)` computes the logits (a batch-invariant one in true
    on-policy mode); `log_softmax` scores the target with `log_softmax(z)[target]`, the native sampler's own
    formula (so that a recomputed log-prob equals the sampled one bit for bit). `entropy_layout` (size S, index
    `[C]` int64): the entropy comes back as `[S]`, cell i's at `index[i]`, zeros elsewhere (a caller's grid the
    backward fills in place; None: `[C]` in cell order). The entropy is zero until the backward pass runs."""
    if not temperature > 0:
        raise ValueError(f"temperature: got {temperature}, expected > 0 (greedy has no log-probs)")
    if token.shape != target.shape or token.dim() != 1:
        raise ValueError(f"token, target: expected two [C] tensors, got {tuple(token.shape)}, {tuple(target.shape)}")
    if at_ids is not None and (at_ids.dim() != 2 or at_ids.shape[0] != token.shape[0]):
        raise ValueError(f"at_ids: expected [C, K] with C = {token.shape[0]}, got {tuple(at_ids.shape)}")
    vocab = weight.shape[0] if vocab is None else vocab
    if not 0 < vocab <= weight.shape[0] or not 0 <= top_k <= vocab:
        raise ValueError(f"vocab, top_k: got {vocab}, {top_k}, expected 1..{weight.shape[0]} and 0..vocab")
    rows = max(1, chunk_elements // vocab)
    log_probs, at, entropy, top_ids, top_lp = _ChunkedHead.apply(
        h,
        weight,
        token,
        target,
        at_ids,
        temperature,
        linear,
        log_softmax,
        with_entropy,
        top_k,
        rows,
        vocab,
        entropy_layout,
    )
    return HeadLogProbs(
        log_probs,
        at if at_ids is not None else None,
        entropy if with_entropy else None,
        top_ids if top_k else None,
        top_lp if top_k else None,
    )
