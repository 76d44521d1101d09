"""Batch-invariant ops for true on-policy mode: each row's result is computed by the same kernel call shapes and
the same reduction order whatever the batch around it, its padding or its position.

A matmul's rounding may depend on how many rows it is given (the library picks a different blocking), so every
product here runs on fixed blocks of `ROW_BLOCK` rows (zero rows pad the last block) as one batched matmul whose
per-block shape never changes. Attention reduces over keys in fixed chunks of `KEY_CHUNK` keys with a running
(online) softmax: a chunk in which every key is masked leaves the running maximum, sum and output exactly
unchanged, so a query sees the same arithmetic over 0..t whether the keys that follow it exist (the trainer's whole
sequence), are stale cache rows or are not there at all (the engine's decode step). Row-wise ops (norms, softmax
over a fixed length, element-wise ops, `topk`) are batch-invariant as they are. Experts are summed per token in
ascending expert order, starting from zero.

Every function here has autograd, so the trainer's recompute and the engine's sampling run the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from moe_models.experts_module import ExpertsModule

ROW_BLOCK = 16
ATTENTION_ROWS = 8
KEY_CHUNK = 16
GATHERED_BLOCKS_PER_EXPERT = 2  # `invariant_experts` gathers weights per block up to this many blocks per expert
MIN_OUT = 8  # `invariant_linear` pads narrower weights to this many rows
POINTWISE_MULTIPLE = 64  # elements: a multiple of every CPU vector loop's stride (2 vectors of 16 floats at most)


def _blocks(x: torch.Tensor, size: int) -> torch.Tensor:
    """`[N, K]` -> `[ceil(N / size), size, K]`, zero rows padding the last block."""
    pad = (-x.shape[0]) % size
    if pad:
        x = torch.cat([x, x.new_zeros(pad, x.shape[1])])
    return x.view(-1, size, x.shape[1])


def invariant_pointwise(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """fn(x) for an element-wise `fn` whose vector and scalar CPU kernels round differently (silu, sigmoid): a
    contiguous tensor's last elements run the scalar loop, so an element's result would depend on how many elements
    the tensor has. fn runs on x flattened and zero-padded to a multiple of `POINTWISE_MULTIPLE` elements, so every
    element takes the vector loop."""
    flat = x.reshape(-1)
    pad = (-flat.numel()) % POINTWISE_MULTIPLE
    return fn(F.pad(flat, (0, pad)))[: flat.numel()].view(x.shape)


def invariant_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`F.linear(x, weight)` (no bias) with every row computed alike: x `[..., in]`, weight `[out, in]` ->
    `[..., out]`. A weight of fewer than `MIN_OUT` rows is padded with zero rows: with one output column the batched
    matmul takes a matrix-vector path for one block and another for several, which round differently."""
    lead, width, out_width = x.shape[:-1], x.shape[-1], weight.shape[0]
    rows = x.reshape(-1, width)
    n = rows.shape[0]
    if n == 0:
        return x.new_zeros(*lead, out_width)
    if out_width < MIN_OUT:
        weight = F.pad(weight, (0, 0, 0, MIN_OUT - out_width))
    blocks = _blocks(rows, ROW_BLOCK)  # [nb, R, in]
    out = torch.bmm(blocks, weight.t().unsqueeze(0).expand(blocks.shape[0], -1, -1))  # [nb, R, out']
    return out.reshape(-1, weight.shape[0])[:n, :out_width].reshape(*lead, out_width)


def invariant_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor,
    scale: float,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """q `[S, H, Q, Dk]`, k `[S, KVH, L, Dk]`, v `[S, KVH, L, Dv]` (query head h reads kv head h // (H / KVH)),
    allowed `[S, Q, L]` bool (every query row must allow at least one key) -> `[S, H, Q, Dv]`; sinks `[H]`: one more
    logit per head in every softmax (it takes weight and adds no value), folded in after the last chunk.

    The query rows of one kv head (its H / KVH heads x Q queries) are cut into blocks of `ATTENTION_ROWS` rows.
    Keys in `allowed`'s False cells must be finite (their weight is exactly 0). A chunk whose keys a row allows none
    of leaves that row's running maximum, sum and output exactly as they were (a row that has seen no key yet keeps
    its -inf maximum and zero sum), so the keys before a row's first allowed one change nothing either."""
    s, h, nq, d = q.shape
    kv_heads, length, dv = k.shape[1], k.shape[2], v.shape[3]
    group = h // kv_heads
    rows = group * nq  # query rows per kv head, head-major
    key_pad, row_pad = (-length) % KEY_CHUNK, (-rows) % ATTENTION_ROWS
    allowed = allowed[:, None].expand(s, group, nq, length).reshape(s, rows, length)
    q = q.reshape(s, kv_heads, rows, d)
    if key_pad:
        k, v = F.pad(k, (0, 0, 0, key_pad)), F.pad(v, (0, 0, 0, key_pad))
        allowed = F.pad(allowed, (0, key_pad))
    if row_pad:
        q = F.pad(q, (0, 0, 0, row_pad))
        first_key_only = torch.zeros(s, row_pad, allowed.shape[2], dtype=torch.bool, device=allowed.device)
        first_key_only[:, :, 0] = True
        allowed = torch.cat([allowed, first_key_only], dim=1)
    blocks = (rows + row_pad) // ATTENTION_ROWS
    qb = q.reshape(s * kv_heads * blocks, ATTENTION_ROWS, d)  # [G, R, D], G = S * KVH * blocks
    masked = ~allowed.view(s, 1, blocks, ATTENTION_ROWS, -1).expand(s, kv_heads, blocks, ATTENTION_ROWS, -1)
    masked = masked.reshape(s * kv_heads * blocks, ATTENTION_ROWS, -1)  # [G, R, L']
    top = qb.new_full(qb.shape[:2], float("-inf"))  # [G, R] running maximum
    sums = qb.new_zeros(qb.shape[:2])
    out = qb.new_zeros(*qb.shape[:2], dv)
    for start in range(0, length + key_pad, KEY_CHUNK):
        chunk = slice(start, start + KEY_CHUNK)
        kc = k[:, :, None, chunk].expand(s, kv_heads, blocks, KEY_CHUNK, d).reshape(-1, KEY_CHUNK, d)  # [G, C, D]
        vc = v[:, :, None, chunk].expand(s, kv_heads, blocks, KEY_CHUNK, dv).reshape(-1, KEY_CHUNK, dv)
        scores = torch.bmm(qb, kc.transpose(1, 2)).mul_(scale).masked_fill_(masked[:, :, chunk], float("-inf"))
        top, rescale, p = _online_step(top, scores)
        sums = sums * rescale + p.sum(dim=-1)
        out = out * rescale[..., None] + torch.bmm(p, vc)
    if sinks is not None:
        sink = sinks.to(out.dtype).view(kv_heads, group, 1).expand(kv_heads, group, nq).reshape(kv_heads, rows)
        sink = F.pad(sink, (0, row_pad)).view(1, kv_heads, blocks, ATTENTION_ROWS).expand(s, -1, -1, -1)
        sink = sink.reshape_as(sums)
        new_top = torch.maximum(top, sink)
        rescale = torch.exp(top - new_top)
        sums = sums * rescale + torch.exp(sink - new_top)
        out = out * rescale[..., None]
    out = out / sums[..., None]  # [G, R, Dv]
    return out.view(s, kv_heads, blocks * ATTENTION_ROWS, dv)[:, :, :rows].reshape(s, h, nq, dv)


def _online_step(top: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chunk of an online softmax: running maximum `top` `[G, R]` and the chunk's `scores` `[G, R, C]` ->
    (new maximum, the factor rescaling what was summed so far, the chunk's exp(scores - new maximum)). A row with
    no finite score so far and none in the chunk gets factor 0 and weights 0 (its sums stay 0)."""
    new_top = torch.maximum(top, scores.amax(dim=-1))
    finite = torch.where(torch.isinf(new_top), torch.zeros_like(new_top), new_top)
    return new_top, torch.exp(top - finite), torch.exp(scores - finite[..., None])


def invariant_experts(
    experts: ExpertsModule,
    x: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    gathered: bool | None = None,
) -> torch.Tensor:
    """sum_k weights[:, k] * expert_{ids[:, k]}(x) `[N, hidden]` for `experts` (`moe_models.moe.Experts`: gate_up_proj
    `[E, 2I, hidden]`, down_proj `[E, hidden, I]`, optional biases, its activation); x `[N, hidden]`, ids and weights
    `[N, K]`.

    Each expert's rows are cut into blocks of `ROW_BLOCK` (zero rows pad its last block) and every block is one entry
    of a batched matmul against its expert's weights, so a row's products never depend on how many rows its expert
    got; each token's contributions are added in ascending expert order from zero. Few blocks (a decode step) run as
    one batched matmul over all experts with the weights gathered per block; many (a training batch) as one batched
    matmul per expert, which copies no weights (`gathered` None: chosen so; True/False: forced). Both give the same
    bits (the same matmul per block)."""
    top_k, num_experts = ids.shape[1], experts.gate_up_proj.shape[0]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # pairs grouped by expert, ascending; a token's pairs stay in order
    token = order // top_k  # [P] token of each sorted pair
    counts = torch.bincount(flat, minlength=num_experts)  # [E]
    rows = x.index_select(0, token)  # [P, hidden] expert-sorted
    blocks = (counts + ROW_BLOCK - 1) // ROW_BLOCK  # [E]
    if gathered is None:
        gathered = int(blocks.sum()) <= GATHERED_BLOCKS_PER_EXPERT * num_experts
    if gathered:
        y = _gathered(experts, rows, flat.index_select(0, order), counts, blocks)
    else:
        y = _per_expert(experts, rows, counts.tolist())
    pair_weights = weights.reshape(-1)[order, None].to(y.dtype)
    return torch.zeros_like(x).index_add_(0, token, (y * pair_weights).to(x.dtype))


def _per_expert(experts: ExpertsModule, rows: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Expert-sorted rows `[P, hidden]` (expert e owns `sizes[e]`) -> their expert's output `[P, hidden]`. The
    activation runs on whole blocks of rows (a multiple of `ROW_BLOCK` rows of 2I values), as in `_gathered`: its
    element-wise kernels then treat each row alike in both."""
    out = []
    up_bias, down_bias = experts.gate_up_proj_bias, experts.down_proj_bias
    for e, chunk in enumerate(rows.split(sizes)):
        if chunk.shape[0]:
            n = chunk.shape[0]
            whole = F.pad(chunk, (0, 0, 0, (-n) % ROW_BLOCK))  # whole blocks: the activation sees what _gathered's does
            gate_up = invariant_linear(whole, experts.gate_up_proj[e])
            if up_bias is not None:
                gate_up = gate_up + up_bias[e]
            y = invariant_linear(experts.activate(gate_up), experts.down_proj[e])[:n]
            out.append(y if down_bias is None else y + down_bias[e])
    return torch.cat(out) if out else rows.new_zeros(0, rows.shape[1])


def _gathered(
    experts: ExpertsModule, rows: torch.Tensor, sorted_experts: torch.Tensor, counts: torch.Tensor, blocks: torch.Tensor
) -> torch.Tensor:
    """`_per_expert` as one batched matmul per projection: sorted_experts `[P]` the expert of each sorted row, counts
    and blocks `[E]` its rows and blocks."""
    num_experts, width = experts.gate_up_proj.shape[0], rows.shape[1]
    first_row = torch.cumsum(counts, 0) - counts  # [E] first sorted row of each expert
    first_slot = (torch.cumsum(blocks, 0) - blocks) * ROW_BLOCK  # [E] its first padded row
    offset = (first_slot - first_row).index_select(0, sorted_experts)
    slot = torch.arange(rows.shape[0], device=rows.device) + offset  # [P]
    block_expert = torch.repeat_interleave(torch.arange(num_experts, device=rows.device), blocks)  # [nb]
    num_blocks = block_expert.numel()
    padded = rows.new_zeros(num_blocks * ROW_BLOCK, width).index_copy(0, slot, rows).view(num_blocks, ROW_BLOCK, width)
    gate_up = torch.bmm(padded, experts.gate_up_proj.index_select(0, block_expert).transpose(1, 2))  # [nb, R, 2I]
    if experts.gate_up_proj_bias is not None:
        gate_up = gate_up + experts.gate_up_proj_bias.index_select(0, block_expert)[:, None]
    y = torch.bmm(experts.activate(gate_up), experts.down_proj.index_select(0, block_expert).transpose(1, 2))
    if experts.down_proj_bias is not None:
        y = y + experts.down_proj_bias.index_select(0, block_expert)[:, None]
    return y.reshape(-1, width).index_select(0, slot)
