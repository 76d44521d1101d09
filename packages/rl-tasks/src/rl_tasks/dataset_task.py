"""A single-turn task read from verl-style dataset files (`.parquet` or `.jsonl`, see `rl_tasks.loaders`).

Validation comes from `val_file`, or, when that is empty, `val_size` rows held out of `train_file`: a seeded
permutation picks them, both splits keep the file's row order, and train rows whose prompt equals a held-out
prompt are dropped, so no validation prompt is in train. Separate files are used as given.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np

from rl_tasks.exact_match import ExactMatchReward
from rl_tasks.example import TaskExample
from rl_tasks.gsm8k import Gsm8kReward
from rl_tasks.loaders import check_dataset_path, load_dataset_file
from rl_tasks.renderer import PROMPT_FORMAT_HELP, PromptFormat, check_prompt_format
from rl_tasks.reward import RewardFn
from rl_tasks.task import Task, TaskSplits, answer_demonstration

_REWARDS = ("exact", "gsm8k")
RESPONSE_TOKENS = 1024  # a dataset task's default response budget: room for a model to reason before its answer
_T = TypeVar("_T")


@dataclass(frozen=True)
class DatasetTaskConfig:
    """`reward`: `exact` (the stripped response equals the ground truth) or `gsm8k` (the extracted final number
    equals the ground truth's). `max_answer_chars`: the answer's text budget (EOS excluded; the warm-up's
    demonstrations and the shortest response budget a run may set); 0 derives it as the longest ground truth of
    either split. `response_tokens`: the default response budget (`rollout.max_new_tokens` 0).
    `default_data_source` names rows without a `data_source` ('': such rows are refused). The alphabet is every
    character of the splits' prompts and ground truths.

    Construction checks all that needs no reading of the data, so a bad setting fails when the command line is
    parsed: `train_file` set, exactly one of `val_file` / `val_size > 0`, and each file set existing with a
    supported suffix. `build()` reads the files; a read or row error names the config key (`task.train_file`,
    `task.val_file`), the file, its 1-based line (JSONL) or row (parquet) and the field."""

    kind: Literal["dataset"] = "dataset"
    train_file: str = field(
        default="",
        metadata={
            "help": "training rows: .parquet or .jsonl with verl's columns (prompt, reward_model.ground_truth, "
            "data_source)"
        },
    )
    val_file: str = field(
        default="", metadata={"help": "validation rows (same format); empty: hold val_size rows out of train_file"}
    )
    val_size: int = field(
        default=0, metadata={"help": "rows held out of train_file for validation (exactly one of val_file, val_size)"}
    )
    seed: int = field(default=0, metadata={"help": "seeds which rows are held out"})
    reward: Literal["exact", "gsm8k"] = field(
        default="exact",
        metadata={"help": "exact: the stripped response equals the ground truth; gsm8k: its final number does"},
    )
    max_answer_chars: int = field(
        default=0, metadata={"help": "the answer's text budget (EOS excluded); 0: the longest ground truth"}
    )
    default_data_source: str = field(
        default="", metadata={"help": "data source of rows without one (empty: such rows are refused)"}
    )
    response_tokens: int = field(
        default=RESPONSE_TOKENS,
        metadata={
            "help": "the response budget in tokens when rollout.max_new_tokens is 0: room to reason before the "
            "answer (at least the longest ground truth plus its end)"
        },
    )
    prompt_format: PromptFormat = field(default="chat", metadata=PROMPT_FORMAT_HELP)

    def __post_init__(self) -> None:
        if self.kind != "dataset":
            raise ValueError(f"task.kind: expected 'dataset', got {self.kind!r}")
        check_prompt_format(self.prompt_format)
        if self.reward not in _REWARDS:
            raise ValueError(f"task.reward: expected one of {_REWARDS}, got {self.reward!r}")
        if self.val_size < 0 or self.max_answer_chars < 0 or self.response_tokens < 0:
            raise ValueError(
                f"task: expected val_size, max_answer_chars, response_tokens >= 0, got {self.val_size}, "
                f"{self.max_answer_chars}, {self.response_tokens}"
            )
        if not self.train_file:
            raise ValueError("task.train_file: expected a .parquet, .jsonl or .json path, got ''")
        if bool(self.val_file) == (self.val_size > 0):
            raise ValueError(
                f"task: expected exactly one of val_file or val_size > 0, got val_file={self.val_file!r}, "
                f"val_size={self.val_size}"
            )
        _keyed("task.train_file", check_dataset_path, self.train_file)
        if self.val_file:
            _keyed("task.val_file", check_dataset_path, self.val_file)

    def _load(self, key: str, path: str) -> list[TaskExample]:
        return _keyed(key, load_dataset_file, path, default_data_source=self.default_data_source or None)

    def build_splits(self) -> TaskSplits:
        """Reads the files (again checking that they exist); a file or row error names its config key."""
        train = self._load("task.train_file", self.train_file)
        if self.val_file:
            return TaskSplits(train=tuple(train), validation=tuple(self._load("task.val_file", self.val_file)))
        return hold_out(train, self.val_size, self.seed, self.train_file)

    def reward_fn(self) -> RewardFn:
        return ExactMatchReward() if self.reward == "exact" else Gsm8kReward()

    def build(self) -> Task:
        splits = self.build_splits()
        examples = (*splits.train, *splits.validation)
        files = {"train": _file_sha256(self.train_file), "val": _file_sha256(self.val_file) if self.val_file else ""}
        fields = {
            k: v for k, v in dataclasses.asdict(self).items() if k not in ("train_file", "val_file", "response_tokens")
        }
        return Task(
            kind="dataset",
            splits=splits,
            reward_fn=self.reward_fn(),
            alphabet="".join(sorted({c for ex in examples for c in ex.prompt + ex.ground_truth})),
            max_answer_chars=self.max_answer_chars or max(len(ex.ground_truth) for ex in examples),
            tool=None,
            demonstrate=answer_demonstration,
            identity={"config": fields, "file_sha256": files},
            prompt_format=self.prompt_format,
            response_tokens=self.response_tokens,
        )


def hold_out(rows: list[TaskExample], size: int, seed: int, where: str) -> TaskSplits:
    """`size` rows picked by a permutation seeded with `seed` as validation (file order kept); train is the
    other rows minus those repeating a validation prompt. Raises when no train row would be left."""
    if size >= len(rows):
        raise ValueError(f"task.val_size: expected fewer than the {len(rows)} rows of {where}, got {size}")
    picked = set(np.random.default_rng(seed).permutation(len(rows))[:size].tolist())
    validation = tuple(ex for i, ex in enumerate(rows) if i in picked)
    held = {ex.prompt for ex in validation}
    train = tuple(ex for i, ex in enumerate(rows) if i not in picked and ex.prompt not in held)
    if not train:
        raise ValueError(
            f"{where}: expected at least one train row whose prompt is not held out (task.val_size), got none: every "
            "train row repeats a held-out prompt"
        )
    return TaskSplits(train=train, validation=validation)


def _keyed(key: str, fn: Callable[..., _T], *args: object, **kwargs: object) -> _T:
    """`fn(*args, **kwargs)`, its ValueError prefixed with the config `key` it concerns."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from exc


def _file_sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
