"""Slot-based, preallocated key/value cache that `CachedModel.forward` appends to and attends over."""

from __future__ import annotations

import torch
from moe_models import MoEConfig


class KVCache:
    """Per layer K `[num_slots, heads, max_len, key_dim]` and V `[num_slots, heads, max_len, value_dim]` (heads: the
    config's `cache_heads`, dims its `key_dim` / `value_dim`; they differ for MLA): `keys[i]` / `values[i]` are views
    of layer i in one contiguous `[num_layers, num_slots, heads, max_len, dim]` tensor each (`key_storage` /
    `value_storage`), so one decode step writes every layer's new K (or V) with one op.

    Invariant: for every slot s, positions 0..lengths[s]-1 of every layer hold the rotated keys and the values
    of that slot's tokens so far; positions at and beyond lengths[s] are stale and never read.
    """

    def __init__(
        self,
        config: MoEConfig,
        num_slots: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        if num_slots < 1 or max_len < 1:
            raise ValueError(f"KVCache: got num_slots={num_slots}, max_len={max_len}, expected both >= 1")
        self.config = config
        self.num_slots = num_slots
        self.max_len = max_len
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (config.num_hidden_layers, num_slots, config.cache_heads, max_len)
        self.key_storage = torch.zeros((*shape, config.key_dim), dtype=dtype, device=self.device)
        self.value_storage = torch.zeros((*shape, config.value_dim), dtype=dtype, device=self.device)
        self.keys: list[torch.Tensor] = list(self.key_storage.unbind(0))
        self.values: list[torch.Tensor] = list(self.value_storage.unbind(0))
        self.lengths = torch.zeros(num_slots, dtype=torch.int64, device=self.device)  # [num_slots]

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"slot: got {slot}, expected an index in [0, {self.num_slots})")

    def reset(self, slot: int) -> None:
        """Marks the slot empty (length 0); its stale contents are overwritten by the next append."""
        self._check_slot(slot)
        self.lengths[slot] = 0

    def length(self, slot: int) -> int:
        self._check_slot(slot)
        return int(self.lengths[slot])

    def write_tokens(
        self, slot_ids: torch.Tensor, positions: torch.Tensor, new_keys: torch.Tensor, new_values: torch.Tensor
    ) -> None:
        """Stores one token per slot in every layer (lengths unchanged): slot_ids, positions [S] int64 on the
        cache's device; new_keys [num_layers, S, heads, key_dim], new_values [num_layers, S, heads, value_dim]."""
        layers, _, kv_heads, max_len = self.key_storage.shape[:4]
        heads = torch.arange(kv_heads, device=self.device)
        rows = ((slot_ids[:, None] * kv_heads + heads) * max_len + positions[:, None]).view(-1)  # [S * KVH]
        kd, vd = self.key_storage.shape[-1], self.value_storage.shape[-1]
        self.key_storage.view(layers, -1, kd)[:, rows] = new_keys.reshape(layers, -1, kd).to(self.dtype)
        self.value_storage.view(layers, -1, vd)[:, rows] = new_values.reshape(layers, -1, vd).to(self.dtype)

    def copy_prefixes(self, copies: list[tuple[int, int, int]]) -> None:
        """For each (source slot, target slot, n): the target holds the source's first n positions of every layer
        and has length n (the source's length is at least n)."""
        by_length: dict[int, list[tuple[int, int]]] = {}
        for source, target, n in copies:
            self._check_slot(source)
            self._check_slot(target)
            if int(self.lengths[source]) < n:
                raise ValueError(f"copy_prefixes: slot {source} holds {int(self.lengths[source])} positions, got n={n}")
            by_length.setdefault(n, []).append((source, target))
        for n, pairs in by_length.items():
            sources = torch.tensor([p[0] for p in pairs], device=self.device)
            targets = torch.tensor([p[1] for p in pairs], device=self.device)
            for storage in (self.key_storage, self.value_storage):
                storage[:, targets, :, :n] = storage[:, sources, :, :n]
            self.lengths[targets] = n
