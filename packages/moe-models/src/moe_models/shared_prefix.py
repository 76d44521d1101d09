"""Rows of a batch that start alike (a GRPO group's samples of one prompt): which earlier row each can read its
prefix from, so that a forward computes it once (`TokenLayout.of`'s owners)."""

from __future__ import annotations

import torch

from moe_models.replay import RouterReplay


def prefix_owners(
    input_ids: torch.Tensor, prefix_lengths: torch.Tensor, replay: RouterReplay | None = None
) -> torch.Tensor:
    """owners `[B]` int64: for each row b, the first row with the same prefix length P = `prefix_lengths[b]`, the
    same tokens in columns `0 .. P-1` and, under `replay`, the same replayed experts and replay mask there (itself
    when no earlier row has them). input_ids `[B, T]`; prefix_lengths `[B]` int64, each in `0 .. T` and within its
    row's real tokens (the caller's guarantee, as a prompt is).

    A token's value in a causal decoder depends only on its row's tokens and routing up to itself, so rows that agree
    on all of these through column P-1 have equal values there, bit for bit in batch-invariant mode."""
    batch, seq = input_ids.shape
    if tuple(prefix_lengths.shape) != (batch,):
        raise ValueError(f"prefix_lengths: got shape {tuple(prefix_lengths.shape)}, expected {(batch,)}")
    lengths = prefix_lengths.to(input_ids.device, torch.int64)
    if bool((lengths < 0).any()) or bool((lengths > seq).any()):
        raise ValueError(f"prefix_lengths: expected values in [0, {seq}], got {lengths.tolist()}")
    rows = torch.arange(batch, device=input_ids.device)
    if batch < 2 or int(lengths.max()) == 0:
        return rows
    width = int(lengths.max())
    inside = torch.arange(width, device=input_ids.device)[None, :] < lengths[:, None]  # [B, W]
    key = [lengths[:, None], torch.where(inside, input_ids[:, :width], -1)]
    if replay is not None:
        ids = replay.ids[:, :width].reshape(batch, width, -1).long()  # [B, W, L*K]
        key.append(torch.where(inside[..., None], ids, -1).reshape(batch, -1))
        key.append(torch.where(inside, replay.mask[:, :width].long(), -1))
    _, inverse = torch.unique(torch.cat(key, dim=1), dim=0, return_inverse=True)  # [B]
    first = torch.full((int(inverse.max()) + 1,), batch, dtype=torch.int64, device=input_ids.device)
    return first.scatter_reduce(0, inverse, rows, reduce="amin").index_select(0, inverse)
