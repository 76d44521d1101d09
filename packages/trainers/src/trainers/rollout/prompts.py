"""Which training prompts a step uses, and the sampling seed of each response: pure functions of (seed, step).

Nothing here has state, so a resumed run draws exactly the prompts and seeds an uninterrupted run would.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rl_tasks.example import TaskExample

SEED_LIMIT = 1 << 62


def _epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, 0x5EED]).permutation(num_examples)


def step_prompts(train: Sequence[TaskExample], step: int, prompts_per_step: int, seed: int) -> list[TaskExample]:
    """Prompts of `step` (1-based): consecutive slices of a fresh seeded permutation per pass over `train`."""
    if step < 1:
        raise ValueError(f"step_prompts: expected step >= 1, got {step}")
    if prompts_per_step > len(train):
        raise ValueError(
            f"step_prompts: expected prompts_per_step <= {len(train)} (the train prompts), got {prompts_per_step}"
        )
    n = len(train)
    orders: dict[int, np.ndarray] = {}
    out = []
    for k in range((step - 1) * prompts_per_step, step * prompts_per_step):
        epoch, offset = divmod(k, n)
        if epoch not in orders:
            orders[epoch] = _epoch_order(n, seed, epoch)
        out.append(train[int(orders[epoch][offset])])
    return out


def sample_seed(seed: int, step: int, prompt_index: int, sample_index: int, *, stream: int = 0) -> int:
    """A distinct engine sampling seed per (run seed, step, prompt, sample); `stream` separates uses
    (0: training rollouts, 1: sampled validation)."""
    return int(np.random.default_rng([seed, step, prompt_index, sample_index, stream]).integers(0, SEED_LIMIT))
