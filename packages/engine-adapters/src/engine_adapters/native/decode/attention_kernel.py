"""A C decode-attention kernel (`csrc/decode_attention.c`, built by `c_kernels`) behind the custom op
`torch.ops.native_engine.decode_attention` that the compiled decode graph calls once per layer (fp32 only, see
`c_kernels.supports`; the graph uses inductor's loops otherwise). The op's CPU implementation is C++
(`csrc/torch_ops.cpp`); `build` compiles the kernel for a shape and registers it there.

Why: inductor's loops for the same math are slower (horizontal sums per key, one serial accumulator for p.v,
bounds checks per load). The C kernel reads each row's keys and values once; that is bound by memory latency on one
core, so rows are split over threads.
"""

from __future__ import annotations

import torch

from engine_adapters.native.decode import c_kernels


def build(head_dim: int, group: int) -> None:
    """Builds (once per process and shape) and registers the kernel for heads of `head_dim` with `group` query heads
    per KV head, so the op serves that shape."""
    defines = (("HEAD_DIM", head_dim), ("GROUP", group))
    c_kernels.register_kernel(c_kernels.ATTENTION, "decode_attention.c", defines, "decode_attention")


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
    threads (>= 1; `csrc/work_pool.h`). Builds the kernel for q's shape first; the op raises ValueError with what it
    got for tensors of the wrong dtype, layout or shape, a slot out of range or a full slot."""
    if q.dim() == 3 and k_new.dim() == 3 and k_new.shape[1] > 0 and q.shape[1] % k_new.shape[1] == 0:
        build(q.shape[2], q.shape[1] // k_new.shape[1])
    return torch.ops.native_engine.decode_attention(
        q, k_new, v_new, key_cache, value_cache, slot_ids, positions, scale, threads
    )


@torch.library.register_fake("native_engine::decode_attention")
def _fake(q: torch.Tensor, *_: object) -> torch.Tensor:
    """The output's shape and dtype, for tracing (the other arguments do not change them)."""
    return q.new_empty(q.shape[0], q.shape[1] * q.shape[2])
