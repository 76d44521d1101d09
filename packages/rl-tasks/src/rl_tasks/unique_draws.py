"""Seeded draws of examples with unique prompts (the generated tasks' splits)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rl_tasks.example import TaskExample
from rl_tasks.task import TaskSplits

MAX_DRAWS_PER_EXAMPLE = 100

# One draw from the seeded stream: (data_source, prompt, ground_truth).
Draw = Callable[[np.random.Generator], tuple[str, str, str]]


def draw_unique(
    who: str, draw: Draw, rng: np.random.Generator, split: str, size: int, taken: set[str]
) -> list[TaskExample]:
    """`size` examples whose prompts are not in `taken` (which gains them); uids are `<split>-<6-digit index>`.
    Raises after `size * MAX_DRAWS_PER_EXAMPLE` draws instead of looping on a too-small prompt space."""
    out: list[TaskExample] = []
    for _ in range(size * MAX_DRAWS_PER_EXAMPLE):
        if len(out) == size:
            return out
        name, prompt, answer = draw(rng)
        if prompt in taken:
            continue
        taken.add(prompt)
        out.append(TaskExample(f"{split}-{len(out):06d}", name, prompt, answer))
    if len(out) == size:
        return out
    raise ValueError(
        f"{who}: expected {size} unique {split} prompts, got only {len(out)} after "
        f"{size * MAX_DRAWS_PER_EXAMPLE} draws; the sources' prompt space is too small for this size"
    )


def draw_splits(who: str, draw: Draw, seed: int, val_size: int, train_size: int) -> TaskSplits:
    """Validation first, then train from the same stream seeded by `seed`; no prompt is in both."""
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    validation = draw_unique(who, draw, rng, "val", val_size, taken)
    train = draw_unique(who, draw, rng, "train", train_size, taken)
    return TaskSplits(train=tuple(train), validation=tuple(validation))
