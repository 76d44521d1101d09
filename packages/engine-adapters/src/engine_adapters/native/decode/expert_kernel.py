"""A C kernel for one MoE layer's routed experts in a decode step (`csrc/moe_experts.c`, built by `c_kernels`),
behind the custom op `torch.ops.native_engine.moe_experts` that the compiled decode graph calls per MoE layer (fp32
only, see `c_kernels.supports`; the graph uses `decode_step.grouped_experts`' grouped matmuls otherwise). The op's
CPU implementation is C++ (`csrc/torch_ops.cpp`); `build` compiles the kernel for a shape and registers it there.

Why: the grouped matmuls run one small MKL matmul per expert with host syncs in between, which dominates at decode
batch sizes. The kernel groups the (row, k) pairs by expert with a counting sort, runs each expert's FFN as
register-tiled matmuls and splits the experts over threads.
"""

from __future__ import annotations

import torch

from engine_adapters.native.decode import c_kernels


def build(hidden: int, inter: int) -> None:
    """Builds (once per process and shape) and registers the kernel for experts of `hidden` -> `inter` -> `hidden`,
    so the op serves that shape."""
    defines = (("HIDDEN", hidden), ("INTER", inter))
    c_kernels.register_kernel(c_kernels.EXPERTS, "moe_experts.c", defines, "moe_experts")


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
    split over `threads` threads (>= 1). Builds the kernel for the weights' shape first; the op raises ValueError
    with what it got for tensors of the wrong dtype, layout or shape, or an expert id out of range."""
    if down.dim() == 3:
        build(down.shape[2], down.shape[1])
    return torch.ops.native_engine.moe_experts(x, h, ids, weights, gate_up, down, threads)


@torch.library.register_fake("native_engine::moe_experts")
def _fake(x: torch.Tensor, *_: object) -> torch.Tensor:
    """The output's shape and dtype, for tracing (the other arguments do not change them)."""
    return torch.empty_like(x)
