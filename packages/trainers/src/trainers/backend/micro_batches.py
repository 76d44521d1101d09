"""Row selection and token-budget splitting of a TrainBatch (mini-batches and micro-batches)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainers.batch import TrainBatch


def _rows(t: torch.Tensor | None, idx: torch.Tensor, width: int) -> torch.Tensor | None:
    return None if t is None else t[idx, :width]


def select_rows(batch: TrainBatch, rows: Sequence[int]) -> TrainBatch:
    """The sub-batch of `rows` (in that order), trimmed to its own longest sequence.

    Trimming drops only columns where every selected row is padding, so every per-token value of a selected
    sample keeps its meaning; shifted tensors keep `width - 1` columns.
    """
    if not rows:
        raise ValueError("select_rows: expected at least one row, got none")
    idx = torch.as_tensor(list(rows), dtype=torch.int64)
    if int(idx.min()) < 0 or int(idx.max()) >= batch.batch_size:
        raise ValueError(f"select_rows: expected rows in [0, {batch.batch_size}), got {list(rows)}")
    width = int(batch.seq_lengths[idx].max())
    return TrainBatch(
        input_ids=batch.input_ids[idx, :width],
        attention_mask=batch.attention_mask[idx, :width],
        response_mask=batch.response_mask[idx, : width - 1],
        rollout_log_probs=batch.rollout_log_probs[idx, : width - 1],
        token_versions=batch.token_versions[idx, : width - 1],
        replay_ids=None if batch.replay_ids is None else batch.replay_ids[idx, :width],
        replay_mask=None if batch.replay_mask is None else batch.replay_mask[idx, :width],
        rewards=batch.rewards[idx],
        is_padding=batch.is_padding[idx],
        prompt_lengths=batch.prompt_lengths[idx],
        seq_lengths=batch.seq_lengths[idx],
        group_ids=[batch.group_ids[i] for i in rows],
        uids=[batch.uids[i] for i in rows],
        teacher_log_probs=_rows(batch.teacher_log_probs, idx, width - 1),
        teacher_top_ids=_rows(batch.teacher_top_ids, idx, width - 1),
        teacher_top_log_probs=_rows(batch.teacher_top_log_probs, idx, width - 1),
        teacher_top_valid=_rows(batch.teacher_top_valid, idx, width - 1),
        data_sources=[batch.data_sources[i] for i in rows],
    )


def split_by_token_budget(
    seq_lengths: Sequence[int],
    rows: Sequence[int],
    budget: int,
    groups: Sequence[str] | None = None,
    prompt_lengths: Sequence[int] | None = None,
) -> list[list[int]]:
    """Groups `rows` into micro-batches whose size is <= `budget`: padded tokens `len(group) * max(seq_lengths)`, or
    with `groups` and `prompt_lengths` (a group key and a prompt length per row of the batch, as `TrainBatch`'s) the
    tokens a forward that shares prompts computes: each group's prompt once, each row's response.

    Rows are taken longest first (ties by row index), so each micro-batch pads little; with groups, a group's rows
    are taken together, groups by their longest row (ties by their first row), so that the samples of one prompt
    share a micro-batch unless the budget cuts the group. A row larger than the budget gets a micro-batch of its own.
    The result is a deterministic function of the inputs.
    """
    if budget < 1:
        raise ValueError(f"split_by_token_budget: expected budget >= 1, got {budget}")
    if (groups is None) != (prompt_lengths is None):
        raise ValueError("split_by_token_budget: expected groups and prompt_lengths together, got one of them")
    if groups is None or prompt_lengths is None:
        order = sorted(rows, key=lambda r: (-int(seq_lengths[r]), r))
        return _fill(order, budget, [int(n) for n in seq_lengths], None, None)
    rank: dict[str, tuple[int, int]] = {}  # group -> (-its longest row's length, its first row)
    for r in rows:
        neg_length, first = rank.get(groups[r], (0, r))
        rank[groups[r]] = (min(neg_length, -int(seq_lengths[r])), min(first, r))
    order = sorted(rows, key=lambda r: (*rank[groups[r]], -int(seq_lengths[r]), r))
    return _fill(order, budget, [int(n) for n in seq_lengths], groups, [int(p) for p in prompt_lengths])


def _fill(
    order: list[int],
    budget: int,
    lengths: list[int],
    groups: Sequence[str] | None,
    prompts: list[int] | None,
) -> list[list[int]]:
    """`order` cut into consecutive micro-batches, each closed when the next row would take it past `budget`: rows x
    the first (longest) row's length without groups, else the rows' lengths with a group's prompt counted once (a
    row alone always fits)."""
    parts: list[list[int]] = []
    current: list[int] = []
    total = 0
    seen: set[str] = set()
    for r in order:
        if groups is None or prompts is None:
            size = lengths[current[0] if current else r] * (len(current) + 1)
        else:
            size = total + lengths[r] - (prompts[r] if groups[r] in seen else 0)
        if current and size > budget:
            parts.append(current)
            current, total, seen = [], 0, set()
            size = lengths[r]
        current.append(r)
        total = size
        if groups is not None:
            seen.add(groups[r])
    if current:
        parts.append(current)
    return parts


def split_even(num_rows: int, parts: int) -> list[list[int]]:
    """`range(num_rows)` cut into `parts` consecutive equal chunks; raises unless `parts` divides `num_rows`."""
    if parts < 1 or num_rows % parts != 0:
        raise ValueError(
            f"split_even: expected the batch size {num_rows} to be a multiple of mini_batches_per_step={parts} "
            "(pad the batch with trainers.pad_to_multiple)"
        )
    size = num_rows // parts
    return [list(range(i * size, (i + 1) * size)) for i in range(parts)]
