"""The default toy RL task: addition and digit sorting as two data sources, with seeded disjoint splits."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from rl_tasks.addition import AdditionSource
from rl_tasks.dispatch import RewardByDataSource
from rl_tasks.exact_match import ExactMatchReward
from rl_tasks.renderer import PROMPT_FORMAT_HELP, PromptFormat, check_prompt_format
from rl_tasks.sorting import SortSource
from rl_tasks.task import Task, TaskSplits, answer_demonstration
from rl_tasks.unique_draws import draw_splits

__all__ = ["TaskSplits", "ToyTaskConfig", "build_splits", "build_toy_task", "toy_reward_fn"]


@dataclass(frozen=True)
class ToyTaskConfig:
    """Mixture of the two toy sources. A weight of 0 disables a source; `train_size` and `val_size` count
    unique prompts. The same config always yields the same splits, and no validation prompt is in train.
    `kind` tags this variant of the apps' task section."""

    kind: Literal["toy"] = "toy"
    addition_weight: float = field(default=0.5, metadata={"help": "share of addition prompts (0: off)"})
    sort_weight: float = field(default=0.5, metadata={"help": "share of digit-sorting prompts (0: off)"})
    addition: AdditionSource = field(default_factory=AdditionSource, metadata={"help": "the addition source"})
    sort: SortSource = field(default_factory=SortSource, metadata={"help": "the sorting source"})
    train_size: int = field(default=20_000, metadata={"help": "unique training prompts"})
    val_size: int = field(default=256, metadata={"help": "unique validation prompts (none of them in train)"})
    seed: int = field(default=0, metadata={"help": "seeds the splits"})
    prompt_format: PromptFormat = field(default="chat", metadata=PROMPT_FORMAT_HELP)

    def __post_init__(self) -> None:
        if self.kind != "toy":
            raise ValueError(f"ToyTaskConfig.kind: expected 'toy', got {self.kind!r}")
        check_prompt_format(self.prompt_format)
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

    def build(self) -> Task:
        return build_toy_task(self)


def _draw(cfg: ToyTaskConfig, rng: np.random.Generator) -> tuple[str, str, str]:
    p_add = cfg.addition_weight / (cfg.addition_weight + cfg.sort_weight)
    source: AdditionSource | SortSource = cfg.addition if rng.random() < p_add else cfg.sort
    prompt, answer = source.sample(rng)
    return source.name, prompt, answer


def build_splits(cfg: ToyTaskConfig) -> TaskSplits:
    """Validation is drawn first, then train from the same seeded stream, skipping validation prompts."""

    def draw(r: np.random.Generator) -> tuple[str, str, str]:
        return _draw(cfg, r)

    return draw_splits("build_splits", draw, cfg.seed, cfg.val_size, cfg.train_size)


def toy_reward_fn(cfg: ToyTaskConfig) -> RewardByDataSource:
    """Exact match for each enabled toy source."""
    fns = {}
    if cfg.addition_weight > 0:
        fns[cfg.addition.name] = ExactMatchReward()
    if cfg.sort_weight > 0:
        fns[cfg.sort.name] = ExactMatchReward()
    return RewardByDataSource(fns)


def build_toy_task(cfg: ToyTaskConfig) -> Task:
    """The single-turn Task of `cfg` (exact-match reward per enabled source)."""
    return Task(
        kind="toy",
        splits=build_splits(cfg),
        reward_fn=toy_reward_fn(cfg),
        alphabet=cfg.alphabet,
        max_answer_chars=cfg.max_answer_chars,
        tool=None,
        demonstrate=answer_demonstration,
        identity=cfg.to_json_dict(),
        prompt_format=cfg.prompt_format,
    )
