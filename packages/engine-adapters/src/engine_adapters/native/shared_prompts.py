"""SharedPrompts: the prompts of one prefill that repeat an earlier one of the same step (a GRPO group's samples of
one prompt), so that the step prefills each distinct prompt once and copies its keys and values to the others'
slots.

Exact: a prompt's keys, values, last logits and routing depend only on its tokens (and the weights), and each
request still samples its own first token from those logits with its own generator. Under batch-invariant ops (true
on-policy mode) the copy is bitwise what its own prefill would have written; otherwise it is equal to float
rounding (a matmul's rounding may depend on how many rows it has).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SharedPrompts:
    """Of the step's S prefill chunks: `unique` `[U]` int64 (ascending) the first of each distinct token list,
    `source` `[S]` int64 each chunk's position in `unique`; `lens` `[S]` the chunk lengths."""

    unique: torch.Tensor
    source: torch.Tensor
    lens: list[int]

    @classmethod
    def of(cls, input_ids: torch.Tensor, lens: list[int]) -> SharedPrompts:
        """input_ids `[N]` int64: the S chunks concatenated, chunk i `lens[i]` long."""
        first: dict[tuple[int, ...], int] = {}
        unique: list[int] = []
        source: list[int] = []
        for i, chunk in enumerate(input_ids.split(lens)):
            key = tuple(chunk.tolist())
            if key not in first:
                first[key] = len(unique)
                unique.append(i)
            source.append(first[key])
        return cls(torch.tensor(unique, dtype=torch.int64), torch.tensor(source, dtype=torch.int64), list(lens))

    @property
    def repeats(self) -> bool:
        return int(self.unique.numel()) < len(self.lens)

    def unique_chunks(
        self, input_ids: torch.Tensor, slot_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """(input_ids `[N_u]`, slot_ids `[U]`, lens `[U]`) of the distinct chunks."""
        chunks = input_ids.split(self.lens)
        picked = self.unique.tolist()
        ids = torch.cat([chunks[i] for i in picked])
        return ids, slot_ids.index_select(0, self.unique.to(slot_ids.device)), [self.lens[i] for i in picked]

    def copies(self, slot_ids: torch.Tensor) -> list[tuple[int, int, int]]:
        """(source slot, target slot, length) for each chunk that repeats an earlier one."""
        slots = slot_ids.tolist()
        unique = self.unique.tolist()
        return [
            (slots[unique[u]], slots[i], self.lens[i]) for i, u in enumerate(self.source.tolist()) if unique[u] != i
        ]

    def expand_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """`[U, V]` of the distinct chunks -> `[S, V]`, each chunk its source's."""
        return logits.index_select(0, self.source.to(logits.device))

    def expand_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Per-token rows of the distinct chunks `[N_u, ...]` -> of every chunk `[N, ...]`."""
        unique_lens = [self.lens[i] for i in self.unique.tolist()]
        starts = torch.tensor([0, *unique_lens[:-1]], dtype=torch.int64).cumsum(0)  # [U]
        index = torch.cat([torch.arange(self.lens[i]) + starts[u] for i, u in enumerate(self.source.tolist())])
        return rows.index_select(0, index.to(rows.device))
