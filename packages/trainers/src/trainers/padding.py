"""Inert padding samples so a batch divides the data-parallel size and the number of mini-batches.

A pad is a synthetic sample, never a copy of a real one: `is_padding=True`, one prompt token and one
response token (both `pad_token_id`), loss mask 0, reward 0, log-prob 0.0, no routing (its rows route
natively), and a group id shared by the pads only, so every group-relative advantage of a pad is exactly 0.
Quality metrics must use `quality_mask`; `assert_inert` checks all of the above on a finished batch.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence

import torch
from rollout_core import NOT_SAMPLED

from trainers.sample import TrainSample

__all__ = [
    "PADDING_DATA_SOURCE",
    "PaddingNotInertError",
    "assert_inert",
    "make_padding_sample",
    "pad_to_multiple",
    "quality_mask",
    "required_multiple",
]

PADDING_DATA_SOURCE = "__padding__"


class PaddingNotInertError(ValueError):
    """A padding sample that could change a loss, an advantage or a metric."""


def required_multiple(dp_size: int, *mini_batch_trajectories: int) -> int:
    """`lcm(dp_size, *mini_batch_trajectories)`: the count a padded batch must divide (sizes in samples)."""
    sizes = (dp_size, *mini_batch_trajectories)
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        raise ValueError(f"required_multiple: expected positive ints, got {sizes}")
    return math.lcm(*sizes)


def make_padding_sample(uid: str, group_id: str, pad_token_id: int) -> TrainSample:
    """One inert sample (see the module docstring)."""
    return TrainSample(
        uid=uid,
        group_id=group_id,
        data_source=PADDING_DATA_SOURCE,
        prompt_ids=[int(pad_token_id)],
        response_ids=[int(pad_token_id)],
        loss_mask=[0],
        rollout_log_probs=[0.0],
        token_versions=[NOT_SAMPLED],
        reward=0.0,
        acc=0.0,
        is_padding=True,
    )


def pad_to_multiple(samples: Sequence[TrainSample], multiple: int, *, pad_token_id: int) -> list[TrainSample]:
    """`samples` (the same objects, in order) followed by the fewest pads making the length a multiple.

    All pads share one fresh group id that no input sample uses.
    """
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"pad_to_multiple: expected a positive int multiple, got {multiple!r}")
    if not samples:
        raise ValueError("pad_to_multiple: expected at least one sample, got none")
    out = list(samples)
    missing = -len(out) % multiple
    if missing == 0:
        return out
    taken = {s.group_id for s in out} | {s.uid for s in out}
    group_id = f"pad-{uuid.uuid4().hex}"
    if group_id in taken:
        raise ValueError(f"pad_to_multiple: fresh group id {group_id} collides with an existing id")
    out.extend(make_padding_sample(f"{group_id}_{i}", group_id, pad_token_id) for i in range(missing))
    return out


def quality_mask(samples: Sequence[TrainSample]) -> torch.Tensor:  # [B] bool
    """True for real samples. Raises if every sample is padding (no quality metric is defined then)."""
    mask = torch.tensor([not s.is_padding for s in samples], dtype=torch.bool)
    if not bool(mask.any()):
        raise ValueError(f"quality_mask: expected at least one real sample, got {len(samples)} padding samples")
    return mask


def _check_pad(s: TrainSample, real_groups: set[str]) -> None:
    if any(s.loss_mask):
        raise PaddingNotInertError(f"pad {s.uid}: expected an all-zero loss mask, got {s.loss_mask}")
    if s.reward != 0.0:
        raise PaddingNotInertError(f"pad {s.uid}: expected reward 0.0, got {s.reward}")
    if s.group_id in real_groups:
        raise PaddingNotInertError(f"pad {s.uid}: expected a group of pads only, got real group {s.group_id!r}")


def assert_inert(samples: Sequence[TrainSample], advantages: torch.Tensor | None = None) -> None:
    """Raises PaddingNotInertError unless every pad is inert and no sample (uid or object) appears twice.

    `advantages` (`[B]` or `[B, T]`, in sample order), when given, must be exactly 0 on every pad row.
    """
    uids = [s.uid for s in samples]
    if len(set(uids)) != len(uids) or len({id(s) for s in samples}) != len(samples):
        raise PaddingNotInertError(f"assert_inert: expected unique samples, got {len(uids) - len(set(uids))} repeats")
    real_groups = {s.group_id for s in samples if not s.is_padding}
    for s in samples:
        if s.is_padding:
            _check_pad(s, real_groups)
    if advantages is None:
        return
    if advantages.shape[0] != len(samples):
        raise ValueError(f"assert_inert: expected advantages with {len(samples)} rows, got {tuple(advantages.shape)}")
    pads = torch.tensor([s.is_padding for s in samples], dtype=torch.bool)
    if bool((advantages[pads] != 0).any()):
        raise PaddingNotInertError(f"assert_inert: expected 0 advantage on pads, got {advantages[pads].tolist()}")
