"""Compiled decode: one decode step of the model's own decoder (`MoEForCausalLM.decode`) under a `GraphContext`,
compiled by `torch.compile`.

The context's ops are `decode_step`'s math (float rounding apart, ~1e-7 in fp32), shaped for inductor rather than
for eager dispatch:
- pure: it reads the KV cache and never writes it. Each layer's new K and V are returned and stored by the caller
  with `KVCache.write_tokens` (one op for all layers), so each row's softmax is split between its cached keys
  (positions < its length) and the token's own key;
- the model and the fused weights are inputs of the compiled function (dynamo lifts module parameters as graph
  inputs), so one compiled graph serves every model of the same shapes, and weight updates (in place or new
  tensors) never recompile it;
- with fp32 weights and cache, attention and the routed experts are C kernels (`attention_kernel`,
  `expert_kernel`: custom ops that inductor calls as they are) run on `GraphDims.kernel_threads`
  threads. Otherwise the experts are `decode_step.grouped_experts` and attention is broadcast multiply + sum,
  not bmm: inductor fuses the gather of each row's slot, q.k, the per-row mask, the softmax and p.v into loops
  reading each cached K and V row once (slow in eager: use `decode_step` there; slower than the kernel);
- batch size, key length and the number of cache slots are dynamic dimensions; the cache length is static
  (symbolic strides make the attention loops slower). A process compiles one graph per model shape and
  cache length, plus one for a batch of 1.
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from moe_models import MoEConfig, MoEForCausalLM
from moe_models.attention import Attention
from moe_models.forward_context import ForwardContext
from moe_models.moe import DenseMLP, Experts

from engine_adapters.native.decode import attention_kernel, c_kernels, expert_kernel
from engine_adapters.native.decode.decode_step import check_room, fused_project, grouped_experts
from engine_adapters.native.decode.decode_weights import LayerWeights
from engine_adapters.native.decode.kv_cache import KVCache


class GraphDims(NamedTuple):
    """Model constants the graph specialises on."""

    heads: int
    kv_heads: int
    head_dim: int
    scaling: float
    top_k: int
    kernel_threads: int = 0  # >= 1: attention and experts by the C kernels on that many threads; 0: inline


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


class GraphContext(ForwardContext):
    """The compiled decode step's ops of the model's decoder: a pure forward (it reads the KV cache and never
    writes it; each layer's new K and V are appended to `new_keys` / `new_values` for the caller to store), fused
    q/k/v and gate/up projections from `weights` (`decode_weights`), and attention and the routed experts by the C
    kernels (`dims.kernel_threads` >= 1) or by inline ops made for inductor.

    positions (= slot lengths before the step), slot_ids: [S]; key_index: arange(L), L = max(1, max(positions));
    storages [layers, slots, KVH, max_len, D]."""

    def __init__(
        self,
        dims: GraphDims,
        weights: list[LayerWeights],
        positions: torch.Tensor,
        slot_ids: torch.Tensor,
        key_index: torch.Tensor,
        key_storage: torch.Tensor,
        value_storage: torch.Tensor,
    ) -> None:
        super().__init__(positions)
        self.dims = dims
        self.weights = weights
        self.slot_ids = slot_ids
        self.key_index = key_index
        self.key_storage = key_storage
        self.value_storage = value_storage
        self.new_keys: list[torch.Tensor] = []
        self.new_values: list[torch.Tensor] = []

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
        self.new_keys.append(k)
        self.new_values.append(v)
        storages = self.key_storage[layer], self.value_storage[layer]
        return _attend(self.dims, q, k, v, *storages, self.slot_ids, self.positions, self.key_index)

    def add_mlp(self, layer: int, mlp: DenseMLP, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, self.weights[layer].gate_up).chunk(2, dim=-1)
        return h + F.linear(F.silu(gate) * up, mlp.down_proj.weight)

    def add_experts(
        self, layer: int, experts: Experts, h: torch.Tensor, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        w = self.weights[layer]
        if w.down is None or w.expert_ids is None:
            raise ValueError("decode weights: an MoE layer built without its expert weights")
        if not self.dims.kernel_threads:
            return grouped_experts(x, h, ids, weights, w.gate_up, w.down, w.expert_ids)
        return torch.ops.native_engine.moe_experts(
            x.contiguous(), h.contiguous(), ids, weights, w.gate_up, w.down, self.dims.kernel_threads
        )


def decode_graph(
    model: MoEForCausalLM, ctx: GraphContext, input_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's decoder on one token per row, input_ids [S] -> (logits [S, V] float32, new keys and values
    [layers, S, KVH, D], expert ids [S, L_moe, K] int64): the function `torch.compile` compiles."""
    h, routed = model.decode(input_ids, ctx)  # [S, hidden]
    logits = model.logits(h, ctx).float()
    ids = torch.stack(routed, dim=1) if routed else input_ids.new_zeros(input_ids.shape[0], 0, ctx.dims.top_k)
    return logits, torch.stack(ctx.new_keys), torch.stack(ctx.new_values), ids


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


@functools.lru_cache(maxsize=64)
def _shapes(config: MoEConfig) -> MoEConfig:
    """What the graph reads of a config: the token ids it never reads cleared, so models that differ only there share
    a graph (cached: `replace` validates a whole config, a cost on every decode step)."""
    return config.replace(bos_token_id=None, eos_token_id=None)


def build_kernels(config: MoEConfig) -> None:
    """Builds and registers the C kernels the compiled step calls for this model shape (cached: cheap when done)."""
    attention_kernel.build(config.head_dim, config.num_attention_heads // config.num_key_value_heads)
    expert_kernel.build(config.hidden_size, config.moe_intermediate_size)


def graph_dims(model: MoEForCausalLM) -> GraphDims:
    cfg, attn = model.config, model.model.layers[0].self_attn
    return GraphDims(
        heads=cfg.num_attention_heads,
        kv_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        scaling=attn.scaling,
        top_k=cfg.num_experts_per_tok,
    )


def compiled_decode_forward(
    model: MoEForCausalLM,
    weights: list[LayerWeights],
    kernel_threads: int,
    input_ids: torch.Tensor,
    slot_ids: torch.Tensor,
    slots: list[int],
    cache: KVCache,
    capture_routing: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`decode_step.decode_forward` through the compiled graph (weights: `decode_weights`' layers): input_ids,
    slot_ids [S] -> (logits [S, V] float32, expert ids [S, L_moe, K] or None); appends the tokens' K/V and advances
    the slots' lengths. The C kernels (fp32 weights and cache only) run on `kernel_threads` threads. Raises
    ValueError, changing nothing, when a slot is full."""
    positions = cache.lengths.index_select(0, slot_ids)  # [S]
    longest = int(positions.max())
    check_room(slots, positions, longest, cache.max_len)
    key_index = torch.arange(max(longest, 1), device=slot_ids.device)  # [L]
    for t in (input_ids, positions, slot_ids, key_index):
        torch._dynamo.maybe_mark_dynamic(t, 0)
    for storage in (cache.key_storage, cache.value_storage):
        torch._dynamo.maybe_mark_dynamic(storage, 1)  # slots (max_len stays static: faster kernels)
    dtype = model.model.embed_tokens.weight.dtype
    fused = c_kernels.supports(dtype, cache.dtype, cache.device)
    dims = graph_dims(model)._replace(kernel_threads=kernel_threads if fused else 0)
    if fused:
        build_kernels(model.config)
    ctx = GraphContext(dims, weights, positions, slot_ids, key_index, cache.key_storage, cache.value_storage)
    graph = _compiled_graph((_shapes(model.config), cache.max_len, cache.dtype, dtype))
    logits, new_keys, new_values, ids = graph(model, ctx, input_ids)
    cache.write_tokens(slot_ids, positions, new_keys, new_values)
    cache.lengths.index_copy_(0, slot_ids, positions + 1)
    return logits, ids if capture_routing else None
