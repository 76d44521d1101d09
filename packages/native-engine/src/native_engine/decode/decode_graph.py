"""Compiled decode: one decode step of the whole model as a pure function of tensors, for `torch.compile`.

A second formulation of `decode_step`'s fast path (same math, float rounding apart, ~1e-7 in fp32), shaped for
inductor rather than for eager dispatch:
- pure: it reads the KV cache and never writes it. Each layer's new K and V are returned and stored by the caller
  with `KVCache.write_tokens` (one op for all layers), so each row's softmax is split between its cached keys
  (positions < its length) and the token's own key;
- weights are inputs, not module attributes, so one compiled graph serves every model of the same shapes, and
  weight updates (in place or new tensors) never recompile it;
- with fp32 weights and cache, attention and the routed experts are C kernels (`attention_kernel`,
  `expert_kernel`: custom ops that inductor calls as they are) run on `GraphDims.kernel_threads`
  threads. Otherwise the experts are `decode_step.routed_experts` and attention is broadcast multiply + sum,
  not bmm: inductor fuses the gather of each row's slot, q.k, the per-row mask, the softmax and p.v into loops
  reading each cached K and V row once (slow in eager: use `decode_step` there; slower than the kernel);
- batch size, key length and the number of cache slots are dynamic dimensions; the cache length is static
  (symbolic strides make the attention loops slower). A process compiles one graph per model shape and
  cache length, plus one for a batch of 1.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from moe_models import MoEForCausalLM
from moe_models.moe import SparseMoeBlock
from moe_models.norm import rms_norm
from moe_models.rope import apply_rotary, rotary_tables

from native_engine.decode import attention_kernel, c_kernels, expert_kernel  # noqa: F401 (the ops register on import)
from native_engine.decode.decode_step import check_room, routed_experts
from native_engine.decode.decode_weights import LayerWeights
from native_engine.decode.kv_cache import KVCache


class GraphDims(NamedTuple):
    """Model constants the graph specialises on."""

    heads: int
    kv_heads: int
    head_dim: int
    scaling: float
    eps: float
    top_k: int
    norm_topk_prob: bool
    kernel_threads: int = 0  # >= 1: attention and experts by the C kernels on that many threads; 0: inline


class GraphLayer(NamedTuple):
    """One decoder layer's weights. MoE layers: gate_up [E, hidden, 2I], down [E, I, hidden], router [E, hidden],
    expert_ids [E]. Dense layers: gate_up [2I, hidden], down [hidden, I] (down_proj's weight), router and
    expert_ids None."""

    input_norm: torch.Tensor
    qkv: torch.Tensor  # [(H + 2 KVH) * D, hidden]
    qk_norm: torch.Tensor  # [H + KVH, D]
    o_proj: torch.Tensor  # [hidden, H * D]
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    router: torch.Tensor | None
    expert_ids: torch.Tensor | None


def _attend(
    dims: GraphDims,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_ids: torch.Tensor,
    positions: torch.Tensor,
    key_index: torch.Tensor,
) -> torch.Tensor:
    """q [S, H, D] rotated, k/v [S, KVH, D] the new token's own; caches [slots, KVH, max_len, D], read at keys
    0 .. L-1 (key_index [L]) of each row's slot and masked at keys >= its position. Returns [S, H * D]."""
    if dims.kernel_threads:
        return torch.ops.native_engine.decode_attention(
            q.contiguous(),
            k.contiguous(),
            v.contiguous(),
            key_cache,
            value_cache,
            slot_ids,
            positions,
            dims.scaling,
            dims.kernel_threads,
        )
    s, length, g = q.shape[0], key_index.shape[0], dims.heads // dims.kv_heads
    q = (q.float() * dims.scaling).view(s, dims.kv_heads, g, 1, dims.head_dim)  # query head h reads kv head h // g
    keys = key_cache.index_select(0, slot_ids)[:, :, None, :length].float()  # [S, KVH, 1, L, D]
    cached = (q * keys).sum(-1)  # [S, KVH, G, L]
    cached = cached.masked_fill((key_index[None, :] >= positions[:, None])[:, None, None, :], float("-inf"))
    own = (q[:, :, :, 0] * k.float()[:, :, None]).sum(-1)  # [S, KVH, G]
    top = torch.maximum(cached.amax(-1), own)  # finite: the own key is never masked
    w_cached, w_own = torch.exp(cached - top[..., None]), torch.exp(own - top)
    values = value_cache.index_select(0, slot_ids)[:, :, None, :length].float()  # [S, KVH, 1, L, D]
    out = (w_cached[..., None] * values).sum(-2) + w_own[..., None] * v.float()[:, :, None]  # [S, KVH, G, D]
    out = out / (w_cached.sum(-1) + w_own)[..., None]
    return out.to(k.dtype).reshape(s, dims.heads * dims.head_dim)


def _experts(dims: GraphDims, x: torch.Tensor, h: torch.Tensor, w: GraphLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """h + the routed experts of normed x (both [S, hidden]), and the expert ids [S, K]."""
    if not dims.kernel_threads:
        return routed_experts(x, h, w.router, w.gate_up, w.down, w.expert_ids, dims.top_k, dims.norm_topk_prob)
    probs = torch.softmax(F.linear(x, w.router), dim=-1, dtype=torch.float32)  # [S, E]
    top, ids = torch.topk(probs, dims.top_k, dim=-1)
    if dims.norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    out = torch.ops.native_engine.moe_experts(
        x.contiguous(), h.contiguous(), ids, top, w.gate_up, w.down, dims.kernel_threads
    )
    return out, ids


def decode_graph(
    dims: GraphDims,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    slot_ids: torch.Tensor,
    key_index: torch.Tensor,
    embed: torch.Tensor,
    inv_freq: torch.Tensor,
    final_norm: torch.Tensor,
    lm_head: torch.Tensor,
    layers: list[GraphLayer],
    key_storage: torch.Tensor,
    value_storage: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, positions (= slot lengths before the step), slot_ids: [S]; key_index: arange(L), L = max(1,
    max(positions)); storages [layers, slots, KVH, max_len, D].

    Returns logits [S, V] float32, new keys and values [layers, S, KVH, D], expert ids [S, L_moe, K] int64."""
    heads, kv_heads, d = dims.heads, dims.kv_heads, dims.head_dim
    h = F.embedding(input_ids, embed)  # [S, hidden]
    cos, signed_sin = rotary_tables(positions, inv_freq, h.dtype)  # [S, D]
    new_keys, new_values, routed = [], [], []
    for i, w in enumerate(layers):
        qkv = F.linear(rms_norm(h, w.input_norm, dims.eps), w.qkv).view(-1, heads + 2 * kv_heads, d)
        qk = F.rms_norm(qkv[:, : heads + kv_heads].float(), (d,), None, dims.eps).to(h.dtype) * w.qk_norm
        qk = apply_rotary(qk, cos, signed_sin)
        q, k, v = qk[:, :heads], qk[:, heads:], qkv[:, heads + kv_heads :]
        attn = _attend(dims, q, k, v, key_storage[i], value_storage[i], slot_ids, positions, key_index)
        h = h + F.linear(attn, w.o_proj)
        x = rms_norm(h, w.post_norm, dims.eps)
        if w.router is None:
            gate, up = F.linear(x, w.gate_up).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, w.down)
        else:
            h, ids = _experts(dims, x, h, w)
            routed.append(ids)
        new_keys.append(k)
        new_values.append(v)
    logits = F.linear(rms_norm(h, final_norm, dims.eps), lm_head).float()
    ids = torch.stack(routed, dim=1) if routed else input_ids.new_zeros(input_ids.shape[0], 0, dims.top_k)
    return logits, torch.stack(new_keys), torch.stack(new_values), ids


_COMPILED: dict[tuple, Callable[..., tuple[torch.Tensor, ...]]] = {}
_COMPILED_LOCK = threading.Lock()  # engines step in worker threads


def _compiled_graph(key: tuple) -> Callable[..., tuple[torch.Tensor, ...]]:
    """torch.compile of decode_graph, one per key of static shapes (model shape, cache length, dtypes), with
    inductor's C++ wrapper (`cpp_wrapper`): the graph makes a kernel call per op of every layer, and calls from C++
    cost less per step than from the Python wrapper, for about the same compile time.

    Each key compiles a fresh copy of decode_graph's code object: dynamo keeps compiled graphs (and counts them
    against its recompile limit, beyond which it would run eagerly) per code object, so engines of different
    shapes in one process never evict each other's graphs or fall back to eager."""
    with _COMPILED_LOCK:
        if key not in _COMPILED:
            code, env = decode_graph.__code__.replace(), decode_graph.__globals__
            _COMPILED[key] = torch.compile(
                types.FunctionType(code, env, decode_graph.__name__), dynamic=False, options={"cpp_wrapper": True}
            )
        return _COMPILED[key]


def graph_layers(model: MoEForCausalLM, weights: list[LayerWeights]) -> list[GraphLayer]:
    """The graph's per-layer inputs: `weights` (fused copies) plus the model's parameters used as they are."""
    out = []
    for layer, w in zip(model.model.layers, weights, strict=True):
        moe = isinstance(layer.mlp, SparseMoeBlock)
        out.append(
            GraphLayer(
                input_norm=layer.input_layernorm.weight,
                qkv=w.qkv,
                qk_norm=w.qk_norm,
                o_proj=layer.self_attn.o_proj.weight,
                post_norm=layer.post_attention_layernorm.weight,
                gate_up=w.gate_up,
                down=w.down if moe else layer.mlp.down_proj.weight,
                router=layer.mlp.gate.weight if moe else None,
                expert_ids=w.expert_ids if moe else None,
            )
        )
    return out


def graph_dims(model: MoEForCausalLM) -> GraphDims:
    cfg, attn = model.config, model.model.layers[0].self_attn
    return GraphDims(
        heads=cfg.num_attention_heads,
        kv_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        scaling=attn.scaling,
        eps=cfg.rms_norm_eps,
        top_k=cfg.num_experts_per_tok,
        norm_topk_prob=cfg.norm_topk_prob,
    )


def compiled_decode_forward(
    model: MoEForCausalLM,
    layers: list[GraphLayer],
    kernel_threads: int,
    input_ids: torch.Tensor,
    slot_ids: torch.Tensor,
    slots: list[int],
    cache: KVCache,
    capture_routing: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`decode_step.decode_forward` through the compiled graph (layers: `graph_layers`): input_ids, slot_ids [S]
    -> (logits [S, V] float32, expert ids [S, L_moe, K] or None); appends the tokens' K/V and advances the slots'
    lengths. The C kernels (fp32 weights and cache only) run on `kernel_threads` threads. Raises ValueError,
    changing nothing, when a slot is full."""
    positions = cache.lengths.index_select(0, slot_ids)  # [S]
    longest = int(positions.max())
    check_room(slots, positions, longest, cache.max_len)
    key_index = torch.arange(max(longest, 1), device=slot_ids.device)  # [L]
    for t in (input_ids, positions, slot_ids, key_index):
        torch._dynamo.maybe_mark_dynamic(t, 0)
    for storage in (cache.key_storage, cache.value_storage):
        torch._dynamo.maybe_mark_dynamic(storage, 1)  # slots (max_len stays static: faster kernels)
    inner = model.model
    fused = c_kernels.supports(inner.embed_tokens.weight.dtype, cache.dtype, cache.device)
    dims = graph_dims(model)._replace(kernel_threads=kernel_threads if fused else 0)
    shapes = model.config.replace(bos_token_id=None, eos_token_id=None, pad_token_id=None)  # what the graph reads
    key = (shapes, cache.max_len, cache.dtype, inner.embed_tokens.weight.dtype)
    logits, new_keys, new_values, ids = _compiled_graph(key)(
        dims,
        input_ids,
        positions,
        slot_ids,
        key_index,
        inner.embed_tokens.weight,
        inner.rotary_emb.inv_freq,
        inner.norm.weight,
        model.lm_head.weight,
        layers,
        cache.key_storage,
        cache.value_storage,
    )
    cache.write_tokens(slot_ids, positions, new_keys, new_values)
    cache.lengths.index_copy_(0, slot_ids, positions + 1)
    return logits, ids if capture_routing else None
