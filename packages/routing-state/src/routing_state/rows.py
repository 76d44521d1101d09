"""Normalising the routing rows an engine hands back into one validated numpy array.

Engines return rows as numpy arrays (vLLM), torch tensors (our model), nested lists (JSON) or raw bytes with a
shape and a dtype (HTTP wire formats). All of them become `[n, num_layers, top_k]` in the spec's storage dtype
here, once, at ingestion; torch is never imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from routing_state.spec import RoutingSpec

RowsLike = Any  # np.ndarray | torch.Tensor | nested list | tuple[bytes, shape, dtype]


def _as_array(rows: RowsLike) -> np.ndarray:
    if isinstance(rows, np.ndarray):
        return rows
    if isinstance(rows, tuple) and len(rows) == 3 and isinstance(rows[0], bytes | bytearray | memoryview):
        data, shape, dtype = rows
        dt = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if len(data) != expected:
            raise ValueError(
                f"routing bytes: expected {expected} bytes for shape {shape} and dtype {dt}, got {len(data)}"
            )
        return np.frombuffer(data, dtype=dt).reshape(shape)
    # A torch tensor (or anything tensor-like) without importing torch: detach, move to host, convert.
    if hasattr(rows, "detach") and hasattr(rows, "cpu") and hasattr(rows, "numpy"):
        return rows.detach().cpu().numpy()
    if isinstance(rows, list | tuple):
        arr = np.asarray(rows)
        if arr.size == 0:
            return np.zeros((0,), dtype=np.int64)
        return arr
    raise ValueError(
        "routing rows: expected a numpy array, a torch tensor, a nested list or (bytes, shape, dtype), "
        f"got {type(rows).__name__}"
    )


def coerce_rows(rows: RowsLike, spec: RoutingSpec) -> np.ndarray:
    """Returns rows as a `[n, num_layers, top_k]` array in `spec.dtype`; raises ValueError on bad input."""
    arr = _as_array(rows)
    if arr.size == 0 and arr.ndim != 3:
        return np.zeros((0, *spec.row_shape), dtype=spec.dtype)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"routing rows: expected an integer dtype, got {arr.dtype}")
    if arr.ndim != 3 or arr.shape[1:] != spec.row_shape:
        raise ValueError(
            f"routing rows: expected shape [n, {spec.num_layers}, {spec.top_k}] "
            f"(rows, layers, top_k), got {list(arr.shape)}"
        )
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= spec.num_experts:
            bad = lo if lo < 0 else hi
            raise ValueError(f"routing rows: expected expert ids in [0, {spec.num_experts}), got {bad}")
    return arr.astype(spec.dtype, copy=False)


def coerce_versions(version: int | Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """One int64 weight version per row: a single int is broadcast; a sequence must have `n` entries."""
    if isinstance(version, bool):
        raise ValueError(f"version: expected an int or a sequence of ints, got {version!r}")
    if isinstance(version, int | np.integer):
        if version < 0:
            raise ValueError(f"version: expected >= 0, got {version}")
        return np.full(n, int(version), dtype=np.int64)
    arr = np.asarray(version)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)) or arr.dtype == np.bool_:
        raise ValueError(f"version: expected an int or a 1-d sequence of ints, got {version!r}")
    if arr.shape[0] != n:
        raise ValueError(f"version: expected one version per row ({n}), got {arr.shape[0]}")
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"version: expected >= 0, got {int(arr.min())}")
    return arr.astype(np.int64)
