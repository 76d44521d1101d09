"""The default toy RL task: addition and digit sorting as two data sources, with seeded disjoint splits."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from rl_tasks.addition import AdditionSource
from rl_tasks.dispatch import RewardByDataSource
from rl_tasks.exact_match import ExactMatchReward
from rl_tasks.example import TaskExample
from rl_tasks.sorting import SortSource

_MAX_DRAWS_PER_EXAMPLE = 100


@dataclass(frozen=True)
class ToyTaskConfig:
    """Mixture of the two toy sources. A weight of 0 disables a source; `train_size` and `val_size` count
    unique prompts. The same config always yields the same splits, and no validation prompt is in train."""

    addition_weight: float = 0.5
    sort_weight: float = 0.5
    addition: AdditionSource = field(default_factory=AdditionSource)
    sort: SortSource = field(default_factory=SortSource)
    train_size: int = 20_000
    val_size: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if self.addition_weight < 0 or self.sort_weight < 0 or self.addition_weight + self.sort_weight <= 0:
            raise ValueError(
                f"ToyTaskConfig: expected non-negative weights with a positive sum, got "
                f"addition_weight={self.addition_weight}, sort_weight={self.sort_weight}"
            )
        if self.train_size < 1 or self.val_size < 1:
            raise ValueError(
                f"ToyTaskConfig: expected train_size >= 1 and val_size >= 1, got {self.train_size}, {self.val_size}"
            )

    def to_json_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """A short stable hash of every field (used to key cached checkpoints)."""
        blob = json.dumps(self.to_json_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def alphabet(self) -> str:
        """Every character a prompt or answer of an enabled source can contain, sorted."""
        chars: set[str] = set()
        if self.addition_weight > 0:
            chars |= set(self.addition.alphabet)
        if self.sort_weight > 0:
            chars |= set(self.sort.alphabet)
        return "".join(sorted(chars))

    @property
    def max_answer_chars(self) -> int:
        """The longest answer any enabled source can produce (EOS not included)."""
        lengths = []
        if self.addition_weight > 0:
            lengths.append(self.addition.max_digits + 1)
        if self.sort_weight > 0:
            lengths.append(self.sort.max_len)
        return max(lengths)


@dataclass(frozen=True)
class TaskSplits:
    train: tuple[TaskExample, ...]
    validation: tuple[TaskExample, ...]


def _draw(cfg: ToyTaskConfig, rng: np.random.Generator) -> tuple[str, str, str]:
    p_add = cfg.addition_weight / (cfg.addition_weight + cfg.sort_weight)
    source: AdditionSource | SortSource = cfg.addition if rng.random() < p_add else cfg.sort
    prompt, answer = source.sample(rng)
    return source.name, prompt, answer


def _draw_unique(
    cfg: ToyTaskConfig, rng: np.random.Generator, split: str, size: int, taken: set[str]
) -> list[TaskExample]:
    out: list[TaskExample] = []
    for _ in range(size * _MAX_DRAWS_PER_EXAMPLE):
        if len(out) == size:
            return out
        name, prompt, answer = _draw(cfg, rng)
        if prompt in taken:
            continue
        taken.add(prompt)
        out.append(TaskExample(f"{split}-{len(out):06d}", name, prompt, answer))
    if len(out) == size:
        return out
    raise ValueError(
        f"build_splits: expected {size} unique {split} prompts, got only {len(out)} after "
        f"{size * _MAX_DRAWS_PER_EXAMPLE} draws; the sources' prompt space is too small for this size"
    )


def build_splits(cfg: ToyTaskConfig) -> TaskSplits:
    """Validation is drawn first, then train from the same seeded stream, skipping validation prompts."""
    rng = np.random.default_rng(cfg.seed)
    taken: set[str] = set()
    validation = _draw_unique(cfg, rng, "val", cfg.val_size, taken)
    train = _draw_unique(cfg, rng, "train", cfg.train_size, taken)
    return TaskSplits(train=tuple(train), validation=tuple(validation))


def toy_reward_fn(cfg: ToyTaskConfig) -> RewardByDataSource:
    """Exact match for each enabled toy source."""
    fns = {}
    if cfg.addition_weight > 0:
        fns[cfg.addition.name] = ExactMatchReward()
    if cfg.sort_weight > 0:
        fns[cfg.sort.name] = ExactMatchReward()
    return RewardByDataSource(fns)
