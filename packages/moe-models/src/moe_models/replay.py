"""Router replay input: the experts to force per token and MoE layer."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RouterReplay:
    """ids: [B, T, L_moe, K] int64 expert ids (layer axis = MoE ordinal); mask: [B, T] bool.

    Where mask is True the router uses `ids` (gate weights re-gathered from the current softmax); where it is
    False the token routes natively and its `ids` row is ignored.
    """

    ids: torch.Tensor
    mask: torch.Tensor

    def validate(self, batch: int, seq: int, num_moe_layers: int, top_k: int, num_experts: int) -> None:
        expected = (batch, seq, num_moe_layers, top_k)
        if tuple(self.ids.shape) != expected:
            raise ValueError(f"RouterReplay.ids shape: got {tuple(self.ids.shape)}, expected {expected}")
        if tuple(self.mask.shape) != (batch, seq):
            raise ValueError(f"RouterReplay.mask shape: got {tuple(self.mask.shape)}, expected {(batch, seq)}")
        if self.mask.dtype != torch.bool:
            raise ValueError(f"RouterReplay.mask dtype: got {self.mask.dtype}, expected torch.bool")
        if self.ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"RouterReplay.ids dtype: got {self.ids.dtype}, expected an integer dtype")
        used = self.ids[self.mask].long()  # [M, L, K]
        if used.numel() == 0:
            return
        low, high = int(used.min()), int(used.max())
        if low < 0 or high >= num_experts:
            raise ValueError(f"RouterReplay.ids: got values in [{low}, {high}], expected [0, {num_experts})")
        if top_k > 1:
            ordered = used.sort(dim=-1).values
            if bool((ordered[..., 1:] == ordered[..., :-1]).any()):
                raise ValueError("RouterReplay.ids: got a masked row with a repeated expert, expected k distinct ids")

    def layer_ids(self, moe_ordinal: int) -> torch.Tensor:
        """[B*T, K] int64 ids of one MoE layer, flattened like the hidden states."""
        ids = self.ids[:, :, moe_ordinal]
        return ids.reshape(-1, ids.shape[-1]).long()

    def flat_mask(self) -> torch.Tensor:
        return self.mask.reshape(-1)
