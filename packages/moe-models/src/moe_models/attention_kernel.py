"""A C decode-attention kernel (`csrc/decode_attention.c`), compiled at first use, as the custom op
`torch.ops.moe_models.decode_attention` that the compiled decode graph calls once per layer.

Why: inductor's loops for the same math ran at ~400 us per layer for 64 rows x 96 positions on the tiny preset
(horizontal sums per key, one serial accumulator for p.v, bounds checks per load); the C kernel streams each row's
keys and values once at ~141 us, close to this machine's memory bandwidth for the 3.1 MB it reads.

Scope: fp32 query, cache and output on the CPU (`supports`); the decode graph uses inductor's formulation for
anything else. The kernel is built with the system C compiler (`$CC`, else `cc`), the one inductor needs too,
into a per-user cache directory keyed by a hash of the source and flags; a missing compiler raises with the
command that failed.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
import threading
from importlib import resources
from pathlib import Path

import torch

_SOURCE = "decode_attention.c"
_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC", "-shared")
_BUILD_LOCK = threading.Lock()
_ptr = ctypes.c_void_p


def supports(dtype: torch.dtype, cache_dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the kernel serves a decode graph with these parameter and cache dtypes on this device."""
    return dtype == torch.float32 and cache_dtype == torch.float32 and device.type == "cpu"


def _cache_dir() -> Path:
    root = os.environ.get("MOE_MODELS_KERNEL_DIR") or os.path.join(tempfile.gettempdir(), f"moe_models_{os.getuid()}")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.cache
def _library(head_dim: int, group: int) -> ctypes.CDLL:
    """The kernel for this head size and query heads per KV head, compiled once per source, flags and shape."""
    source = resources.files("moe_models").joinpath("csrc", _SOURCE).read_text()
    compiler = os.environ.get("CC", "cc")
    flags = (*_FLAGS, f"-DHEAD_DIM={head_dim}", f"-DGROUP={group}")
    digest = hashlib.sha256("\0".join((source, compiler, *flags)).encode()).hexdigest()[:16]
    target = _cache_dir() / f"decode_attention_{digest}.so"
    with _BUILD_LOCK:
        if not target.exists():
            _compile(compiler, flags, source, target)
    lib = ctypes.CDLL(str(target))
    lib.decode_attention.restype = ctypes.c_int64
    lib.decode_attention.argtypes = [_ptr] * 7 + [ctypes.c_int64] * 4 + [ctypes.c_float, _ptr, ctypes.c_int64]
    return lib


def _compile(compiler: str, flags: tuple[str, ...], source: str, target: Path) -> None:
    """Builds `target` from `source` atomically (a temporary file renamed into place: concurrent builders agree)."""
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src, out = Path(tmp) / _SOURCE, Path(tmp) / target.name
        src.write_text(source)
        command = [compiler, *flags, str(src), "-o", str(out), "-lm"]
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError as e:
            raise RuntimeError(
                f"decode-attention kernel: C compiler not found: got CC={compiler!r}, expected a gcc- or "
                "clang-compatible compiler on PATH (torch.compile's CPU backend needs one too)"
            ) from e
        if done.returncode != 0:
            raise RuntimeError(f"decode-attention kernel: `{' '.join(command)}` failed:\n{done.stderr}")
        os.replace(out, target)


def _check(name: str, t: torch.Tensor, dtype: torch.dtype, dims: int) -> None:
    if t.dtype != dtype or t.dim() != dims or not t.is_contiguous() or t.device.type != "cpu":
        raise ValueError(
            f"decode_attention: {name} got {t.dtype} {tuple(t.shape)} contiguous={t.is_contiguous()} on "
            f"{t.device}, expected a contiguous {dims}-d {dtype} CPU tensor"
        )


@torch.library.custom_op("moe_models::decode_attention", mutates_args=())
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
    OpenMP threads (>= 1)."""
    for name, t, dims in (("q", q, 3), ("k_new", k_new, 3), ("v_new", v_new, 3)):
        _check(name, t, torch.float32, dims)
    for name, t in (("key_cache", key_cache), ("value_cache", value_cache)):
        _check(name, t, torch.float32, 4)
    for name, t in (("slot_ids", slot_ids), ("positions", positions)):
        _check(name, t, torch.int64, 1)
    if threads < 1:
        raise ValueError(f"decode_attention: threads got {threads}, expected >= 1")
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
    status = _library(head_dim, heads // kv_heads).decode_attention(
        *(_ptr(t.data_ptr()) for t in (q, k_new, v_new, key_cache, value_cache, slot_ids, positions)),
        rows,
        num_slots,
        kv_heads,
        max_len,
        scale,
        _ptr(out.data_ptr()),
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


@decode_attention.register_fake
def _fake(
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
    """The output's shape and dtype, for tracing."""
    return q.new_empty(q.shape[0], q.shape[1] * q.shape[2])
