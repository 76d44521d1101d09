"""`RayWeightSync`: the `trainers.weight_sync.WeightSync` whose buckets travel through Ray's object store. Each
bucket is put into the store by the trainer's process; the handle carries the object references; `fetch` reads
them wherever the engine runs."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import numpy as np
import torch
from trainers.weight_sync import DEFAULT_BUCKET_BYTES, WeightHandle, pack, unpack_all


class RayWeightSync:
    """Needs a connected Ray (`ray.init`) in both the publishing and the fetching process. A publish packs into
    buffers this object keeps (`ray.put` copies a bucket into the object store, so they are free again at once)."""

    def __init__(self, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
        self.bucket_bytes = bucket_bytes
        self._scratch: list[np.ndarray] = []

    def publish(self, weights: Mapping[str, torch.Tensor], version: int) -> WeightHandle:
        import ray

        buckets = pack(weights, self.bucket_bytes, self._scratch)
        return WeightHandle(version, tuple(ray.put(b) for b in buckets))

    def fetch(self, handle: WeightHandle) -> dict[str, torch.Tensor]:
        import ray

        return unpack_all(ray.get(list(handle.buckets)))

    async def fetch_async(self, handle: WeightHandle) -> dict[str, torch.Tensor]:
        """`fetch` for an asyncio actor: awaits the buckets (a blocking `ray.get` would hold its event loop)."""
        return unpack_all(await asyncio.gather(*handle.buckets))
