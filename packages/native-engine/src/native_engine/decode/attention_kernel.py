"""A C decode-attention kernel (`csrc/decode_attention.c`, built by `c_kernels`) as the custom op
`torch.ops.native_engine.decode_attention` that the compiled decode graph calls once per layer (fp32 only, see
`c_kernels.supports`; the graph uses inductor's loops otherwise).

Why: inductor's loops for the same math are slower (horizontal sums per key, one serial accumulator for p.v,
bounds checks per load). The C kernel reads each row's keys and values once; that is bound by memory latency on one
core, so rows are split over threads.
"""

from __future__ import annotations

import ctypes

import torch

from native_engine.decode.c_kernels import check_tensors, check_threads, define_op, function, ptr

_OP = "decode_attention"
_ARGS = [ptr] * 7 + [ctypes.c_int64] * 4 + [ctypes.c_float, ptr, ctypes.c_int64]


def decode_attention(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_ids: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    threads: int,
) -> torch.Tensor:
    """q [S, H, D] rotated queries; k_new, v_new [S, KVH, D] each row's own key and value (not in the cache);
    caches [slots, KVH, max_len, D], of which row r reads positions 0 .. positions[r]-1 of slot slot_ids[r].
    Returns [S, H * D]: softmax(scale * q.k) . v over those keys and the own one, rows split over `threads`
    threads (>= 1; `csrc/work_pool.h`).
    Also the CPU implementation of the op `torch.ops.native_engine.decode_attention`, which the compiled graph calls."""
    f32, i64 = torch.float32, torch.int64
    check_tensors(
        _OP,
        (
            ("q", q, f32, 3),
            ("k_new", k_new, f32, 3),
            ("v_new", v_new, f32, 3),
            ("key_cache", key_cache, f32, 4),
            ("value_cache", value_cache, f32, 4),
            ("slot_ids", slot_ids, i64, 1),
            ("positions", positions, i64, 1),
        ),
    )
    check_threads(_OP, threads)
    rows, heads, head_dim = q.shape
    num_slots, kv_heads, max_len = key_cache.shape[:3]
    own = (rows, kv_heads, head_dim)
    shapes = (k_new.shape, v_new.shape, value_cache.shape, key_cache.shape[3], slot_ids.shape, positions.shape)
    if shapes != (own, own, key_cache.shape, head_dim, (rows,), (rows,)) or heads % kv_heads:
        raise ValueError(
            f"decode_attention: got q {tuple(q.shape)}, k_new {tuple(k_new.shape)}, v_new {tuple(v_new.shape)}, "
            f"caches {tuple(key_cache.shape)} / {tuple(value_cache.shape)}, slot_ids {tuple(slot_ids.shape)}, "
            f"positions {tuple(positions.shape)}; expected q [S, H, D], k_new and v_new [S, KVH, D], caches "
            "[slots, KVH, max_len, D], slot_ids and positions [S], H a multiple of KVH"
        )
    out = q.new_empty(rows, heads * head_dim)
    kernel = function("decode_attention.c", (("HEAD_DIM", head_dim), ("GROUP", heads // kv_heads)), _OP, _ARGS)
    status = kernel(
        *(t.data_ptr() for t in (q, k_new, v_new, key_cache, value_cache, slot_ids, positions)),
        rows,
        num_slots,
        kv_heads,
        max_len,
        scale,
        out.data_ptr(),
        threads,
    )
    if status < 0:
        raise MemoryError(f"decode_attention: could not allocate {heads // kv_heads * (max_len + 1)} scratch floats")
    if status > 0:
        r = status - 1
        raise ValueError(
            f"decode_attention: row {r} got slot {int(slot_ids[r])} and {int(positions[r])} cached positions, "
            f"expected a slot in [0, {num_slots}) and fewer than {max_len} positions"
        )
    return out


def _fake(q: torch.Tensor, *_: object) -> torch.Tensor:
    """The output's shape and dtype, for tracing (the other arguments do not change them)."""
    return q.new_empty(q.shape[0], q.shape[1] * q.shape[2])


define_op(
    "decode_attention(Tensor q, Tensor k_new, Tensor v_new, Tensor key_cache, Tensor value_cache, Tensor slot_ids, "
    "Tensor positions, float scale, int threads) -> Tensor",
    decode_attention,
    _fake,
)
