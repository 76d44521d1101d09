"""The eager decode step of `CachedModel.forward`: every chunk is exactly one token.

The model's own decoder (`MoEForCausalLM.decode`) runs it under a `DecodeContext`, whose ops are made for a decode
step of a small model, which per-op overhead dominates: the same math as the general cached forward
(`cached_forward`, to float rounding, ~1e-7 in fp32) with far fewer tensor ops per call. A compiled `CachedModel`
runs the same decoder under `decode_graph.GraphContext` instead (ops shaped for inductor).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from moe_models import MoEForCausalLM
from moe_models.attention import Attention
from moe_models.forward_context import ForwardContext
from moe_models.moe import DenseMLP, Experts
from moe_models.rope import apply_rotary

from engine_adapters.native.decode.decode_weights import LayerWeights
from engine_adapters.native.decode.kv_cache import KVCache


@dataclass(frozen=True)
class DecodeGeometry:
    """Where the S new tokens go and which cache rows attention reads.

    Attention reads slots `lo .. lo + R - 1` as one view of the cache when that range is at most twice the batch
    (`gather` None); rows of the range outside the batch compute finite garbage that is dropped. Otherwise the
    batch's slots are copied out (`gather` = slot_ids) and R = S.
    """

    positions: torch.Tensor  # [S] int64, the new token's position (= its rotary position and the old length)
    write_rows: torch.Tensor  # [S, KVH] int64, rows of a layer's cache viewed as [slots * KVH * max_len, D]
    key_len: int  # keys 0 .. key_len - 1 are read: the longest filled prefix in the batch after the append
    lo: int
    num_rows: int  # R
    scatter: torch.Tensor | None  # [S] slot_ids - lo, None when the batch is exactly lo .. lo + S - 1 in order
    gather: torch.Tensor | None  # [S] slot_ids when the batch's slots are copied out of the cache
    mask: torch.Tensor  # [R * KVH, 1, key_len] additive (0 or -inf) in the model dtype; [1, 1, 1] zero when every
    # row read has exactly key_len keys (nothing to mask: attention then skips adding it)
    masked: bool


def check_room(slots: list[int], positions: torch.Tensor, longest: int, max_len: int) -> None:
    """Raises ValueError when a slot has no room for one more token (positions [S], longest = their max)."""
    if longest + 1 > max_len:
        full = [s for s, p in zip(slots, positions.tolist(), strict=True) if p + 1 > max_len]
        raise ValueError(
            f"slot {full[0]}: got {max_len} cached + 1 new token = {max_len + 1}, expected <= max_len {max_len}"
        )


def fused_project(
    attn: Attention, w: LayerWeights, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`Attention`'s q, k, v of h [S, hidden] by one fused qkv matmul: rotated q [S, H, D], rotated k and v
    [S, KVH, D]."""
    heads, kv_heads, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    qkv = F.linear(h, w.qkv, w.qkv_bias).view(h.shape[0], heads + 2 * kv_heads, d)
    qk = qkv[:, : heads + kv_heads]
    if w.qk_norm is not None and attn.q_norm is not None:
        eps = attn.q_norm.variance_epsilon  # q_norm and k_norm share it (config.rms_norm_eps)
        # RMSNorm of q and k heads together; statistics in float32, weight applied in the model dtype (as RMSNorm)
        qk = F.rms_norm(qk.float(), (d,), None, eps).to(h.dtype) * w.qk_norm
    qk_rot = apply_rotary(qk, cos, signed_sin)  # [S, H + KVH, D]
    return qk_rot[:, :heads], qk_rot[:, heads:], qkv[:, heads + kv_heads :]


def decode_geometry(
    slot_ids: torch.Tensor, slots: list[int], cache: KVCache, dtype: torch.dtype, num_kv_heads: int
) -> DecodeGeometry:
    """slots: slot_ids as a list (already validated as distinct and in range). Raises ValueError, changing
    nothing, when a slot is full."""
    positions = cache.lengths.index_select(0, slot_ids)  # [S]
    shortest, longest = (int(v) for v in torch.aminmax(positions))
    check_room(slots, positions, longest, cache.max_len)
    key_len = longest + 1
    heads = torch.arange(num_kv_heads, device=slot_ids.device)
    write_rows = (slot_ids[:, None] * num_kv_heads + heads) * cache.max_len + positions[:, None]  # [S, KVH]
    lo, hi = min(slots), max(slots) + 1
    scatter = gather = None
    if hi - lo == len(slots) and shortest == longest:  # the batch is a whole slot range of one length
        if slots != list(range(lo, hi)):
            scatter = slot_ids - lo
        mask = torch.zeros(1, 1, 1, dtype=dtype, device=slot_ids.device)
        return DecodeGeometry(positions, write_rows, key_len, lo, hi - lo, scatter, gather, mask, False)
    if hi - lo <= 2 * len(slots):
        row_lens = cache.lengths[lo:hi]  # [R] batch rows: their position; other rows: anything finite
        if slots != list(range(lo, hi)):
            scatter = slot_ids - lo
    else:
        lo, hi, row_lens, gather = 0, len(slots), positions, slot_ids
    keys = torch.arange(key_len, device=slot_ids.device)
    mask = torch.where(keys <= row_lens[:, None], 0.0, float("-inf")).to(dtype)  # [R, L]
    mask = mask[:, None, None, :].expand(-1, num_kv_heads, 1, -1).reshape(-1, 1, key_len)
    return DecodeGeometry(positions, write_rows, key_len, lo, hi - lo, scatter, gather, mask, True)


class DecodeContext(ForwardContext):
    """The decode step's ops of the model's decoder: one fused q/k/v projection with one norm and one rotary pass
    over all q and k heads together, K/V written with one `index_put_` each into the cache viewed as rows,
    attention as `baddbmm` (scale and additive mask fused) + softmax + `bmm` over the batch's slots read in place,
    residual adds fused into `addmm`, and the experts as two grouped matmuls over expert-sorted token copies.
    weights: per layer, the fused copies (`decode_weights`)."""

    def __init__(self, geo: DecodeGeometry, cache: KVCache, weights: list[LayerWeights]) -> None:
        super().__init__(geo.positions)
        self.geo = geo
        self.cache = cache
        self.weights = weights

    def project(
        self,
        attn: Attention,
        h: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        queries: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return fused_project(attn, self.weights[attn.layer_idx], h, cos, signed_sin)

    def attend(self, layer: int, attn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [S, H, D], k/v [S, KVH, D] -> [S, H * D]; writes the tokens' K/V."""
        geo = self.geo
        k_cache, v_cache = self.cache.keys[layer], self.cache.values[layer]
        heads, kv_heads, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
        k_cache.view(-1, d).index_put_((geo.write_rows,), k.to(k_cache.dtype))
        v_cache.view(-1, d).index_put_((geo.write_rows,), v.to(v_cache.dtype))
        if geo.scatter is not None:
            q = q.new_zeros(geo.num_rows, heads, d).index_copy_(0, geo.scatter, q)
        q = q.reshape(geo.num_rows * kv_heads, attn.group_size, d)  # query head h reads kv head h // group_size
        if geo.gather is None:
            rows = slice(geo.lo, geo.lo + geo.num_rows)
            keys, values = k_cache[rows, :, : geo.key_len], v_cache[rows, :, : geo.key_len]  # [R, KVH, L, D] views
        else:
            keys = k_cache[:, :, : geo.key_len].index_select(0, geo.gather)  # [S, KVH, L, D] copies
            values = v_cache[:, :, : geo.key_len].index_select(0, geo.gather)
        keys = keys.reshape(-1, geo.key_len, d).to(q.dtype)
        values = values.reshape(-1, geo.key_len, d).to(q.dtype)
        # [R * KVH, G, L]; beta=0 when nothing is masked: the same alpha * q.k as adding a zero mask, bit for bit
        scores = torch.baddbmm(geo.mask, q, keys.transpose(1, 2), beta=1.0 if geo.masked else 0.0, alpha=attn.scaling)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        if probs.dtype != q.dtype:
            probs = probs.to(q.dtype)
        out = torch.bmm(probs, values).view(geo.num_rows, heads * d)  # [R, H * D]
        return out if geo.scatter is None else out.index_select(0, geo.scatter)

    def add_linear(
        self,
        layer: int,
        op: str,
        residual: torch.Tensor,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return torch.addmm(residual if bias is None else residual + bias, x, weight.t())

    def add_mlp(self, layer: int, mlp: DenseMLP, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, self.weights[layer].gate_up).chunk(2, dim=-1)
        return torch.addmm(h, F.silu(gate) * up, mlp.down_proj.weight.t())

    def add_experts(
        self, layer: int, experts: Experts, h: torch.Tensor, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        w = self.weights[layer]
        if w.down is None or w.expert_ids is None:
            raise ValueError("decode weights: an MoE layer built without its expert weights")
        return grouped_experts(x, h, ids, weights, w.gate_up, w.down, w.expert_ids)


def grouped_experts(
    x: torch.Tensor,
    h: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    expert_ids: torch.Tensor,
) -> torch.Tensor:
    """h + experts(x) `[S, hidden]` (x normed, h residual; ids and gate weights `[S, K]`): two grouped matmuls over
    expert-sorted token copies. gate_up [E, hidden, 2I], down [E, I, hidden], expert_ids [E] (`LayerWeights`)."""
    top_k = ids.shape[1]
    sorted_experts, order = torch.sort(ids.view(-1), stable=True)  # [S * K] pairs grouped by expert, ascending
    offsets = torch.searchsorted(sorted_experts, expert_ids, right=True, out_int32=True)  # [E] end of each group
    token = order // top_k  # [S * K]
    gate_up_out = F.grouped_mm(x.index_select(0, token), gate_up, offs=offsets)  # [S * K, 2I]
    gate, up = gate_up_out.chunk(2, dim=-1)
    y = F.grouped_mm(F.silu(gate) * up, down, offs=offsets)  # [S * K, hidden]
    pair_weights = weights.reshape(-1).index_select(0, order).to(y.dtype)[:, None]
    return h.index_add(0, token, y * pair_weights)


def routed_experts(
    x: torch.Tensor,
    h: torch.Tensor,
    router: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    expert_ids: torch.Tensor,
    top_k: int,
    norm_topk_prob: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The router then `grouped_experts`: x: [S, hidden] normed, h: [S, hidden] residual -> (h + moe(x) [S,
    hidden], expert ids [S, K]); router: [E, hidden] (for a pure graph of tensors, `decode_graph`)."""
    probs = torch.softmax(F.linear(x, router), dim=-1, dtype=torch.float32)  # [S, E]
    top, ids = torch.topk(probs, top_k, dim=-1)  # top == probs.gather(1, ids)
    if norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    return grouped_experts(x, h, ids, top, gate_up, down, expert_ids), ids


def decode_forward(
    model: MoEForCausalLM,
    weights: list[LayerWeights],
    input_ids: torch.Tensor,
    slot_ids: torch.Tensor,
    slots: list[int],
    cache: KVCache,
    capture_routing: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """input_ids, slot_ids: [S]; returns (logits [S, V] float32, expert ids [S, L_moe, K] or None)."""
    embed = model.model.embed_tokens.weight
    geo = decode_geometry(slot_ids, slots, cache, embed.dtype, model.config.num_key_value_heads)
    ctx = DecodeContext(geo, cache, weights)
    h, routed = model.decode(input_ids, ctx)  # [S, hidden]
    logits = model.logits(h, ctx).float()
    cache.lengths.index_copy_(0, slot_ids, geo.positions + 1)
    if not capture_routing:
        return logits, None
    return logits, model.stack_routing(routed, len(slots))
