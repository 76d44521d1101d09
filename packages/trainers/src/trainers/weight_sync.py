"""WeightSync: how a trainer's weights reach the engines, in their own dtype (bf16 stays bf16), in buckets.

The trainer `publish`es its named tensors as a version; what it gets back is a small `WeightHandle` that travels to
every engine (through the driver, without the data); each engine `fetch`es the tensors. A bucket is one flat uint8
buffer with the layout of the tensors packed in it, so it moves zero-copy through Ray's object store (numpy
arrays are stored out of band) and unpacks into views of any dtype. Implementations:

- `LocalWeightSync`: trainer and engine in one process (sync_ppo): the handle carries the buckets themselves;
- `async_pipeline.ray_session.weight_sync.RayWeightSync`: each bucket is put into Ray's object store by the
  trainer's process; the handle carries the object references; `fetch` reads them wherever the engine runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

DEFAULT_BUCKET_BYTES = 256 << 20


@dataclass(frozen=True)
class TensorSlot:
    """Where one tensor lies in its bucket: bytes `[offset, offset + nbytes)`."""

    name: str
    dtype: str  # torch dtype name, e.g. "bfloat16"
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class WeightBucket:
    slots: tuple[TensorSlot, ...]
    data: np.ndarray  # uint8 [total bytes]


@dataclass(frozen=True)
class WeightHandle:
    """A published version: `buckets` are `WeightBucket`s (local) or references to them (Ray)."""

    version: int
    buckets: tuple[Any, ...]


def pack(
    weights: Mapping[str, torch.Tensor],
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    scratch: list[np.ndarray] | None = None,
) -> list[WeightBucket]:
    """Tensors (any dtype, any device) in name order into buckets of at most `bucket_bytes` (a tensor larger than
    that gets a bucket of its own). `scratch`: buffers the buckets are packed into, reused (and grown) from one
    call to the next, for a caller that is done with the previous buckets (memory a process has touched before takes
    no page faults: on a 315M-parameter model, fresh buffers made a pack ~10x slower)."""
    if bucket_bytes < 1:
        raise ValueError(f"pack: expected bucket_bytes >= 1, got {bucket_bytes}")
    groups: list[list[tuple[str, torch.Tensor]]] = [[]]
    size = 0
    for name in sorted(weights):
        t = weights[name].detach()
        n = t.numel() * t.element_size()
        if groups[-1] and size + n > bucket_bytes:
            groups.append([])
            size = 0
        groups[-1].append((name, t))
        size += n
    groups = [g for g in groups if g]
    if scratch is None:
        return [_pack_group(g, None) for g in groups]
    while len(scratch) < len(groups):
        scratch.append(np.empty(0, dtype=np.uint8))
    return [_pack_group(g, scratch, i) for i, g in enumerate(groups)]


def _pack_group(group: list[tuple[str, torch.Tensor]], scratch: list[np.ndarray] | None, i: int = 0) -> WeightBucket:
    total = sum(t.numel() * t.element_size() for _, t in group)
    if scratch is None:
        data = np.empty(total, dtype=np.uint8)
    else:
        if scratch[i].size < total:
            scratch[i] = np.empty(total, dtype=np.uint8)
        data = scratch[i][:total]
    flat = torch.from_numpy(data)
    slots, offset = [], 0
    for name, t in group:
        n = t.numel() * t.element_size()
        flat[offset : offset + n] = t.contiguous().cpu().reshape(-1).view(torch.uint8)
        slots.append(TensorSlot(name, str(t.dtype).removeprefix("torch."), tuple(t.shape), offset, n))
        offset += n
    return WeightBucket(tuple(slots), data)


def unpack(bucket: WeightBucket) -> dict[str, torch.Tensor]:
    """Views into the bucket's buffer, each in its own dtype: read them (copy them into the engine's weights), never
    write them: Ray's zero-copy buffers are read-only, and copying a 1.2 GB version to make it writable cost more
    than the load itself."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        flat = torch.from_numpy(bucket.data)
    out = {}
    for s in bucket.slots:
        dtype = getattr(torch, s.dtype)
        out[s.name] = flat[s.offset : s.offset + s.nbytes].view(dtype).reshape(s.shape)
    return out


class WeightSync(Protocol):
    def publish(self, weights: Mapping[str, torch.Tensor], version: int) -> WeightHandle: ...

    def fetch(self, handle: WeightHandle) -> dict[str, torch.Tensor]: ...


class LocalWeightSync:
    def __init__(self, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
        self.bucket_bytes = bucket_bytes

    def publish(self, weights: Mapping[str, torch.Tensor], version: int) -> WeightHandle:
        return WeightHandle(version, tuple(pack(weights, self.bucket_bytes)))

    def fetch(self, handle: WeightHandle) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for bucket in handle.buckets:
            out |= unpack(bucket)
        return out


def unpack_all(buckets: list[WeightBucket]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for bucket in buckets:
        out |= unpack(bucket)
    return out
