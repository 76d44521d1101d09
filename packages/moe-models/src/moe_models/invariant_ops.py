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

import torch
import torch.nn.functional as F

ROW_BLOCK = 16
ATTENTION_ROWS = 8
KEY_CHUNK = 16
GATHERED_BLOCKS_PER_EXPERT = 2  # `invariant_experts` gathers weights per block up to this many blocks per expert


def _blocks(x: torch.Tensor, size: int) -> torch.Tensor:
    """`[N, K]` -> `[ceil(N / size), size, K]`, zero rows padding the last block."""
    pad = (-x.shape[0]) % size
    if pad:
        x = torch.cat([x, x.new_zeros(pad, x.shape[1])])
    return x.view(-1, size, x.shape[1])


def invariant_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`F.linear(x, weight)` (no bias) with every row computed alike: x `[..., in]`, weight `[out, in]` ->
    `[..., out]`."""
    lead, width = x.shape[:-1], x.shape[-1]
    rows = x.reshape(-1, width)
    n = rows.shape[0]
    if n == 0:
        return x.new_zeros(*lead, weight.shape[0])
    blocks = _blocks(rows, ROW_BLOCK)  # [nb, R, in]
    out = torch.bmm(blocks, weight.t().unsqueeze(0).expand(blocks.shape[0], -1, -1))  # [nb, R, out]
    return out.reshape(-1, weight.shape[0])[:n].reshape(*lead, weight.shape[0])


def invariant_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """q `[S, H, Q, D]`, k and v `[S, KVH, L, D]` (query head h reads kv head h // (H / KVH)), allowed `[S, Q, L]`
    bool (every query row must allow at least one key of the first chunk: key 0 for a causal row) -> `[S, H, Q, D]`.

    The query rows of one kv head (its H / KVH heads x Q queries) are cut into blocks of `ATTENTION_ROWS` rows.
    Keys in `allowed`'s False cells must be finite (their weight is exactly 0)."""
    s, h, nq, d = q.shape
    kv_heads, length = k.shape[1], k.shape[2]
    rows = (h // kv_heads) * nq  # query rows per kv head, head-major
    key_pad, row_pad = (-length) % KEY_CHUNK, (-rows) % ATTENTION_ROWS
    allowed = allowed[:, None].expand(s, h // kv_heads, nq, length).reshape(s, rows, length)
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
    top = sums = out = None
    for start in range(0, length + key_pad, KEY_CHUNK):
        chunk = slice(start, start + KEY_CHUNK)
        kc = k[:, :, None, chunk].expand(s, kv_heads, blocks, KEY_CHUNK, d).reshape(-1, KEY_CHUNK, d)  # [G, C, D]
        vc = v[:, :, None, chunk].expand(s, kv_heads, blocks, KEY_CHUNK, d).reshape(-1, KEY_CHUNK, d)
        scores = torch.bmm(qb, kc.transpose(1, 2)).mul_(scale).masked_fill_(masked[:, :, chunk], float("-inf"))
        chunk_top = scores.amax(dim=-1)  # [G, R]
        if top is None:
            top = chunk_top  # finite: every row allows a key of the first chunk
            p = torch.exp(scores - top[..., None])
            sums, out = p.sum(dim=-1), torch.bmm(p, vc)
            continue
        new_top = torch.maximum(top, chunk_top)
        rescale = torch.exp(top - new_top)  # exactly 1 where the chunk changes nothing
        p = torch.exp(scores - new_top[..., None])
        sums = sums * rescale + p.sum(dim=-1)
        out = out * rescale[..., None] + torch.bmm(p, vc)
        top = new_top
    assert out is not None and sums is not None  # length >= 1
    out = out / sums[..., None]  # [G, R, D]
    return out.view(s, kv_heads, blocks * ATTENTION_ROWS, d)[:, :, :rows].reshape(s, h, nq, d)


def invariant_experts(
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    x: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    gathered: bool | None = None,
) -> torch.Tensor:
    """sum_k weights[:, k] * expert_{ids[:, k]}(x) `[N, hidden]` (gate_up_proj `[E, 2I, hidden]`, down_proj
    `[E, hidden, I]`; x `[N, hidden]`, ids and weights `[N, K]`).

    Each expert's rows are cut into blocks of `ROW_BLOCK` (zero rows pad its last block) and every block is one entry
    of a batched matmul against its expert's weights, so a row's products never depend on how many rows its expert
    got; each token's contributions are added in ascending expert order from zero. Few blocks (a decode step) run as
    one batched matmul over all experts with the weights gathered per block; many (a training batch) as one batched
    matmul per expert, which copies no weights (`gathered` None: chosen so; True/False: forced). Both give the same
    bits (the same matmul per block)."""
    top_k, num_experts = ids.shape[1], gate_up_proj.shape[0]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # pairs grouped by expert, ascending; a token's pairs stay in order
    token = order // top_k  # [P] token of each sorted pair
    counts = torch.bincount(flat, minlength=num_experts)  # [E]
    rows = x.index_select(0, token)  # [P, hidden] expert-sorted
    blocks = (counts + ROW_BLOCK - 1) // ROW_BLOCK  # [E]
    if gathered is None:
        gathered = int(blocks.sum()) <= GATHERED_BLOCKS_PER_EXPERT * num_experts
    if gathered:
        y = _gathered(gate_up_proj, down_proj, rows, flat.index_select(0, order), counts, blocks)
    else:
        y = _per_expert(gate_up_proj, down_proj, rows, counts.tolist())
    pair_weights = weights.reshape(-1)[order, None].to(y.dtype)
    return torch.zeros_like(x).index_add_(0, token, (y * pair_weights).to(x.dtype))


def _per_expert(
    gate_up_proj: torch.Tensor, down_proj: torch.Tensor, rows: torch.Tensor, sizes: list[int]
) -> torch.Tensor:
    """Expert-sorted rows `[P, hidden]` (expert e owns `sizes[e]`) -> their expert's output `[P, hidden]`."""
    out = []
    for e, chunk in enumerate(rows.split(sizes)):
        if chunk.shape[0]:
            gate, up = invariant_linear(chunk, gate_up_proj[e]).chunk(2, dim=-1)
            out.append(invariant_linear(F.silu(gate) * up, down_proj[e]))
    return torch.cat(out) if out else rows.new_zeros(0, rows.shape[1])


def _gathered(
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    rows: torch.Tensor,
    experts: torch.Tensor,
    counts: torch.Tensor,
    blocks: torch.Tensor,
) -> torch.Tensor:
    """`_per_expert` as one batched matmul per projection: experts `[P]` the expert of each sorted row, counts and
    blocks `[E]` its rows and blocks."""
    num_experts, width = gate_up_proj.shape[0], rows.shape[1]
    first_row = torch.cumsum(counts, 0) - counts  # [E] first sorted row of each expert
    first_slot = (torch.cumsum(blocks, 0) - blocks) * ROW_BLOCK  # [E] its first padded row
    slot = torch.arange(rows.shape[0], device=rows.device) + (first_slot - first_row).index_select(0, experts)  # [P]
    block_expert = torch.repeat_interleave(torch.arange(num_experts, device=rows.device), blocks)  # [nb]
    num_blocks = block_expert.numel()
    padded = rows.new_zeros(num_blocks * ROW_BLOCK, width).index_copy(0, slot, rows).view(num_blocks, ROW_BLOCK, width)
    gate_up = torch.bmm(padded, gate_up_proj.index_select(0, block_expert).transpose(1, 2))  # [nb, R, 2I]
    gate, up = gate_up.chunk(2, dim=-1)
    y = torch.bmm(F.silu(gate) * up, down_proj.index_select(0, block_expert).transpose(1, 2))  # [nb, R, hidden]
    return y.reshape(-1, width).index_select(0, slot)
