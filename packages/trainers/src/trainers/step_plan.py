"""StepPlan: how one update splits its batch, decided on the host before any forward.

Mini-batches are consecutive equal slices of the batch (`mini_batches_per_step` of them); under data parallelism
each rank takes rows `rank::world` of each; a rank's share runs in micro-batches of at most `micro_batch_tokens`
padded tokens, longest rows first. Every rank runs the same number of forwards per mini-batch (FSDP2 gathers
parameters layer by layer, collectively), so a rank with fewer micro-batches gets inert ones (`None`). Loss-token
and sequence counts are the mini-batch's, over all ranks: the loss denominators.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainers.aggregation import count_nonempty_seqs, count_tokens
from trainers.backend.data_parallel import DataParallel
from trainers.backend.micro_batches import split_by_token_budget, split_even
from trainers.batch import TrainBatch


@dataclass(frozen=True)
class MiniBatchPlan:
    rows: list[int]  # the whole mini-batch (every rank)
    local: list[int]  # this rank's rows
    micro: list[list[int] | None]  # this rank's micro-batches; None: an inert forward (data parallel)
    num_tokens: float  # loss tokens of the whole mini-batch, all ranks
    num_seqs: float  # sequences with at least one loss token, all ranks
    micro_tokens: list[float]  # loss tokens of each micro-batch (0 for inert ones)


@dataclass(frozen=True)
class StepPlan:
    mini_batches: list[MiniBatchPlan]

    @classmethod
    def build(
        cls,
        batch: TrainBatch,
        mask: torch.Tensor,
        *,
        mini_batches: int,
        micro_batch_tokens: int,
        dp: DataParallel | None,
        shares_prompts: bool = False,
    ) -> StepPlan:
        """`mask` `[B, T-1]`: the loss mask on the host (after any rollout-correction rejection); `shares_prompts`: the
        backend computes a group's prompt once per micro-batch (`split_by_token_budget` keeps groups together)."""
        lengths = batch.seq_lengths.tolist()
        sharing = (batch.group_ids, batch.prompt_lengths.tolist()) if shares_prompts else (None, None)
        slices = split_even(batch.batch_size, mini_batches)
        local = [rows if dp is None else dp.shard(rows) for rows in slices]
        micro: list[list[list[int] | None]] = [
            split_by_token_budget(lengths, rows, micro_batch_tokens, *sharing) for rows in local
        ]
        counts = torch.tensor(
            [[count_tokens(mask[rows]), count_nonempty_seqs(mask[rows])] for rows in local], dtype=torch.float64
        )
        if dp is not None:
            counts = dp.sum(counts).cpu()
            most = dp.max([len(m) for m in micro])
            micro = [m + [None] * (n - len(m)) for m, n in zip(micro, most, strict=True)]
        plans = []
        for rows, mine, parts, (tokens, seqs) in zip(slices, local, micro, counts.tolist(), strict=True):
            part_tokens = [0.0 if p is None else count_tokens(mask[p]) for p in parts]
            plans.append(MiniBatchPlan(rows, mine, parts, tokens, seqs, part_tokens))
        return cls(plans)
