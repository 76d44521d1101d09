"""The attention math every context shares once it has its queries, keys, values and mask: softmax attention with
optional sinks, and the sliding-window band of a mask. Contexts differ in how they find keys, not in this."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def band(allowed: torch.Tensor, query_pos: torch.Tensor, key_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """`allowed` (bool, `[..., Q, L]`) limited to keys within the sliding window: key position > query position -
    window (transformers' rule: a query sees itself and the window - 1 keys before it). query_pos `[..., Q]`, key_pos
    `[L]` broadcast against `allowed`; None: no window."""
    if window is None:
        return allowed
    return allowed & (key_pos > query_pos[..., None] - window)


def softmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor,
    scaling: float,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """q `[B, H, Q, Dk]`, k `[B, KVH, L, Dk]`, v `[B, KVH, L, Dv]` (query head h reads kv head h // (H / KVH)),
    allowed bool broadcastable to `[B, H, Q, L]` (every row allows a key) -> `[B, H, Q, Dv]`.

    Without sinks: `scaled_dot_product_attention`. With sinks `[H]`: each head's softmax has one more logit (its sink)
    that takes weight and adds no value, as GPT-OSS computes it (the row max subtracted first)."""
    group = q.shape[1] // k.shape[1]
    if sinks is None and q.device.type == "cpu":  # the CPU kernel reads the kv head of each group itself
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scaling, enable_gqa=group > 1)
    if group > 1:
        k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    if sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scaling)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling  # [B, H, Q, L]
    scores = scores.masked_fill(~allowed, float("-inf"))
    sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    logits = torch.cat([scores, sink], dim=-1)
    logits = logits - logits.amax(dim=-1, keepdim=True)
    probs = torch.softmax(logits, dim=-1)[..., :-1]
    return torch.matmul(probs.to(v.dtype), v)
