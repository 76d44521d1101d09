"""Index plan of one `CachedModel.forward` call: where new tokens are written and which keys each query sees."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttentionGroup:
    """Chunks attended together, padded to the group's longest chunk.

    token_index: [S_g, Q_g] int64, row s holds the flat indices (into the N new tokens) of chunk s, padded
    with a valid index where query_valid is False. key_len: the longest filled prefix among the group's slots
    after the append (keys beyond it are never read). additive_mask: [S_g, 1, group_size * Q_g, key_len]
    float32, 0 where query (head-group-major) may attend, -inf elsewhere; padded query rows see key 0 only.
    """

    slots: torch.Tensor  # [S_g] int64 cache slots
    token_index: torch.Tensor  # [S_g, Q_g] int64
    query_valid: torch.Tensor  # [S_g, Q_g] bool
    key_len: int
    additive_mask: torch.Tensor  # [S_g, 1, G * Q_g, key_len] float32
    allowed: torch.Tensor  # [S_g, Q_g, key_len] bool, True where additive_mask's query (any head) is 0
    is_identity: bool  # True when token_index.flatten() == arange(N) (every chunk, all valid)
    slot_start: int | None  # s when slots == arange(s, s + S_g), letting keys be read as a view
    windowed: dict[int, tuple[torch.Tensor, torch.Tensor]]  # sliding window W -> its (additive_mask, allowed)

    def masks(self, window: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(additive_mask, allowed) of a layer with this sliding window (None: causal only)."""
        return (self.additive_mask, self.allowed) if window is None else self.windowed[window]


@dataclass(frozen=True)
class CachedBatchPlan:
    """write_slots/write_positions: [N] int64, the cache cell of each new token. positions double as rotary
    positions. last_token_index: [S] int64, flat index of each chunk's last token."""

    write_slots: torch.Tensor
    write_positions: torch.Tensor
    last_token_index: torch.Tensor
    groups: list[AttentionGroup]
    new_lengths: torch.Tensor  # [S] int64, slot lengths after the append


def build_plan(
    slot_ids: torch.Tensor,
    query_lens: list[int],
    start_lengths: list[int],
    group_size: int,
    windows: set[int] | frozenset[int] = frozenset(),
) -> CachedBatchPlan:
    """Decode chunks (length 1) form one group, longer chunks another; chunk order inside N is preserved. `windows`:
    the model's sliding-window sizes, each group gets their masks too."""
    device = slot_ids.device
    lens = torch.tensor(query_lens, dtype=torch.int64, device=device)  # [S]
    starts = torch.tensor(start_lengths, dtype=torch.int64, device=device)  # [S]
    offsets = torch.cumsum(lens, 0) - lens  # [S] flat index of each chunk's first token
    chunk_of_token = torch.repeat_interleave(torch.arange(len(query_lens), device=device), lens)  # [N]
    within = torch.arange(int(lens.sum()), device=device) - offsets[chunk_of_token]  # [N]
    write_positions = starts[chunk_of_token] + within
    decode = [i for i, n in enumerate(query_lens) if n == 1]
    prefill = [i for i, n in enumerate(query_lens) if n > 1]
    groups = [
        _group(members, slot_ids, lens, starts, offsets, group_size, len(query_lens), windows)
        for members in (decode, prefill)
        if members
    ]
    return CachedBatchPlan(
        write_slots=slot_ids[chunk_of_token],
        write_positions=write_positions,
        last_token_index=offsets + lens - 1,
        groups=groups,
        new_lengths=starts + lens,
    )


def _group(
    members: list[int],
    slot_ids: torch.Tensor,
    lens: torch.Tensor,
    starts: torch.Tensor,
    offsets: torch.Tensor,
    group_size: int,
    num_chunks: int,
    windows: set[int] | frozenset[int],
) -> AttentionGroup:
    device = slot_ids.device
    idx = torch.tensor(members, dtype=torch.int64, device=device)
    g_lens, g_starts, g_offsets = lens[idx], starts[idx], offsets[idx]  # [S_g]
    width = int(g_lens.max())
    key_len = int((g_starts + g_lens).max())
    q_pos = torch.arange(width, device=device)  # [Q_g]
    query_valid = q_pos[None, :] < g_lens[:, None]  # [S_g, Q_g]
    token_index = torch.where(query_valid, g_offsets[:, None] + q_pos[None, :], g_offsets[:, None])
    abs_pos = g_starts[:, None] + q_pos[None, :]  # [S_g, Q_g] absolute position of each query
    keys = torch.arange(key_len, device=device)
    causal = keys[None, None, :] <= abs_pos[:, :, None]  # [S_g, Q_g, L] causal within the slot

    def masks(allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        allowed = torch.where(query_valid[:, :, None], allowed, keys[None, None, :] == 0)
        additive = torch.zeros(allowed.shape, dtype=torch.float32, device=device)
        additive.masked_fill_(~allowed, float("-inf"))
        shape = (len(members), 1, group_size * width, key_len)
        return additive[:, None].expand(-1, group_size, -1, -1).reshape(shape), allowed

    mask, allowed = masks(causal)
    windowed = {w: masks(causal & (keys[None, None, :] > abs_pos[:, :, None] - w)) for w in windows}
    is_identity = len(members) == num_chunks and bool(query_valid.all())
    slots = slot_ids[idx]
    first = int(slots[0])
    contiguous = bool(torch.equal(slots, torch.arange(first, first + len(members), device=device)))
    return AttentionGroup(
        slots=slots,
        token_index=token_index,
        query_valid=query_valid,
        key_len=key_len,
        additive_mask=mask,
        allowed=allowed,
        is_identity=is_identity,
        slot_start=first if contiguous else None,
        windowed=windowed,
    )
