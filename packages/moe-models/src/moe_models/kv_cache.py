"""Slot-based, preallocated key/value cache for `MoEForCausalLM.forward_cached`."""

from __future__ import annotations

import torch

from moe_models.config import MoEConfig


class KVCache:
    """Per layer K and V of shape [num_slots, num_kv_heads, max_len, head_dim].

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
        shape = (num_slots, config.num_key_value_heads, max_len, config.head_dim)
        self.keys: list[torch.Tensor] = [
            torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(config.num_hidden_layers)
        ]
        self.values: list[torch.Tensor] = [
            torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(config.num_hidden_layers)
        ]
        self.lengths = torch.zeros(num_slots, dtype=torch.int64, device=self.device)  # [num_slots]

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"slot: got {slot}, expected an index in [0, {self.num_slots})")

    def reset(self, slot: int) -> None:
        """Marks the slot empty (length 0); its stale contents are overwritten by the next append."""
        self._check_slot(slot)
        self.lengths[slot] = 0

    def reset_all(self) -> None:
        self.lengths.zero_()

    def length(self, slot: int) -> int:
        self._check_slot(slot)
        return int(self.lengths[slot])

    def memory_bytes(self) -> int:
        per_tensor = self.keys[0].numel() * self.keys[0].element_size()
        return 2 * per_tensor * len(self.keys)
