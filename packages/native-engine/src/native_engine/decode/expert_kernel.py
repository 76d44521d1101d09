"""A C kernel for one MoE layer's routed experts in a decode step (`csrc/moe_experts.c`, built by `c_kernels`),
as the custom op `torch.ops.native_engine.moe_experts` that the compiled decode graph calls per MoE layer (fp32 only,
see `c_kernels.supports`; the graph uses `decode_step.routed_experts`' grouped matmuls otherwise).

Why: the grouped matmuls run one small MKL matmul per expert with host syncs in between, which dominates at decode
batch sizes. The kernel groups the (row, k) pairs by expert with a counting sort, runs each expert's FFN as
register-tiled matmuls and splits the experts over threads.
"""

from __future__ import annotations

import ctypes

import torch

from native_engine.decode.c_kernels import check_tensors, check_threads, define_op, function, ptr

_OP = "moe_experts"
_ARGS = [ptr] * 6 + [ctypes.c_int64] * 3 + [ptr, ctypes.c_int64]


def moe_experts(
    x: torch.Tensor,
    h: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    threads: int,
) -> torch.Tensor:
    """x [S, hidden] normed input, h [S, hidden] residual, ids [S, K] int64 expert ids, weights [S, K] their gate
    weights, gate_up [E, hidden, 2I] (gate columns first), down [E, I, hidden].
    Returns h + sum_k weights[:, k] * (silu(x @ gate) * (x @ up)) @ down of expert ids[:, k]: [S, hidden], experts
    split over `threads` threads (>= 1).
    Also the CPU implementation of the op `torch.ops.native_engine.moe_experts`, which the compiled graph calls."""
    f32 = torch.float32
    check_tensors(
        _OP,
        (
            ("x", x, f32, 2),
            ("h", h, f32, 2),
            ("ids", ids, torch.int64, 2),
            ("weights", weights, f32, 2),
            ("gate_up", gate_up, f32, 3),
            ("down", down, f32, 3),
        ),
    )
    check_threads(_OP, threads)
    rows, hidden = x.shape
    experts, inter = down.shape[:2]
    top_k = ids.shape[1]
    expected = ((rows, hidden), (rows, top_k), (experts, hidden, 2 * inter), (experts, inter, hidden))
    if (h.shape, weights.shape, gate_up.shape, down.shape) != expected or ids.shape[0] != rows:
        raise ValueError(
            f"moe_experts: got x {tuple(x.shape)}, h {tuple(h.shape)}, ids {tuple(ids.shape)}, weights "
            f"{tuple(weights.shape)}, gate_up {tuple(gate_up.shape)}, down {tuple(down.shape)}; expected x and h "
            "[S, hidden], ids and weights [S, K], gate_up [E, hidden, 2I], down [E, I, hidden]"
        )
    out = torch.empty_like(x)
    kernel = function("moe_experts.c", (("HIDDEN", hidden), ("INTER", inter)), _OP, _ARGS)
    status = kernel(
        *(t.data_ptr() for t in (x, h, ids, weights, gate_up, down)), rows, top_k, experts, out.data_ptr(), threads
    )
    if status < 0:
        raise MemoryError(f"moe_experts: could not allocate scratch memory for {rows} rows x {top_k} experts")
    if status > 0:
        row = status - 1
        raise ValueError(f"moe_experts: row {row} got expert ids {ids[row].tolist()}, expected ids in [0, {experts})")
    return out


def _fake(x: torch.Tensor, *_: object) -> torch.Tensor:
    """The output's shape and dtype, for tracing (the other arguments do not change them)."""
    return torch.empty_like(x)


define_op(
    "moe_experts(Tensor x, Tensor h, Tensor ids, Tensor weights, Tensor gate_up, Tensor down, int threads) -> Tensor",
    moe_experts,
    _fake,
)
