"""The built task the warm-up and the rollout consume: splits, reward, alphabet, answer budget, optional tool,
prompt format.

A task is built from its config (`<Kind>TaskConfig.build()`); everything here is torch-free.

Episode layout, shared by the warm-up's training sequences and the rollout's contexts: the prompt, then the model's
turns and the environment's observations in order, each model turn closed by EOS; how the prompt and the
observations become tokens is the task's prompt format (`rl_tasks.renderer`: by default the tokenizer's chat
template). A single-turn task has exactly one model turn. Observations are never trained on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardFn


@dataclass(frozen=True)
class Piece:
    """One stretch of an episode after the prompt: a model turn (`trainable`, followed by EOS in the token
    sequence) or an environment observation (not trainable, no EOS)."""

    text: str
    trainable: bool

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text:
            raise ValueError(f"Piece.text: expected a non-empty str, got {self.text!r}")


class ToolEnv(Protocol):
    """The environment of a multi-turn task. Deterministic: the same (example, turn_text) always gives the
    same observation."""

    @property
    def max_turns(self) -> int:
        """The most model turns of one episode (>= 1); the last turn gets no observation."""
        ...

    @property
    def max_observation_chars(self) -> int:
        """The longest text `observation` can return, whatever the turn text (bounds a response's length)."""
        ...

    def observation(self, example: TaskExample, turn_text: str) -> str | None:
        """The text appended after the model's finished turn (`turn_text`: EOS and special tokens excluded),
        or None to end the episode. Written in the task's alphabet (`max_observation_chars` bounds its tokens
        through it)."""
        ...


@dataclass(frozen=True)
class TaskSplits:
    train: tuple[TaskExample, ...]
    validation: tuple[TaskExample, ...]


def answer_demonstration(example: TaskExample) -> tuple[Piece, ...]:
    """The single-turn demonstration: the ground truth as the one trainable piece."""
    return (Piece(example.ground_truth, trainable=True),)


def check_demonstration(pieces: tuple[Piece, ...], example: TaskExample) -> tuple[Piece, ...]:
    """`pieces` unchanged if it is a valid episode: at least one piece, all `Piece`s, the last one trainable, every
    observation right after a model turn."""
    if not isinstance(pieces, tuple) or not pieces or not all(isinstance(p, Piece) for p in pieces):
        raise ValueError(f"demonstration of {example.uid!r}: expected a non-empty tuple of Piece, got {pieces!r:.200}")
    if not pieces[-1].trainable:
        raise ValueError(
            f"demonstration of {example.uid!r}: expected the last piece to be a model turn (trainable), got "
            f"{pieces[-1]!r:.200}"
        )
    for before, piece in zip((None, *pieces), pieces, strict=False):
        if not piece.trainable and (before is None or not before.trainable):
            raise ValueError(
                f"demonstration of {example.uid!r}: expected every observation right after a model turn, got "
                f"{piece!r:.100} after {before!r:.100}"
            )
    return pieces


@dataclass(frozen=True, eq=False)
class Task:
    """A built task.

    Invariants: both splits are non-empty and fixed by the config (and data files) alone; every character of
    every prompt and ground truth is in `alphabet` (sorted, no duplicates); `max_answer_chars` >= 1 bounds one
    model turn's text (EOS excluded), so a turn's token budget is `max_answer_chars + 1`; `tool` is None for a
    single-turn task. `identity` is JSON-serialisable and holds everything that determines the task (config
    fields and data-file hashes), so `fingerprint()` is stable across runs and machines. `response_tokens`: the
    default budget of one model turn in tokens when a run sets none, when it must exceed the answer's (a dataset's
    model reasons before its answer); 0: the answer's budget. It does not change the task's data, so it is not part
    of `identity`.
    """

    kind: str
    splits: TaskSplits
    reward_fn: RewardFn
    alphabet: str
    max_answer_chars: int
    tool: ToolEnv | None
    demonstrate: Callable[[TaskExample], tuple[Piece, ...]]
    identity: Mapping[str, object]
    prompt_format: str = "chat"
    response_tokens: int = 0

    def __post_init__(self) -> None:
        if self.prompt_format not in ("chat", "plain"):
            raise ValueError(
                f"Task {self.kind!r}: expected prompt_format 'chat' or 'plain', got {self.prompt_format!r}"
            )
        if not self.splits.train or not self.splits.validation:
            raise ValueError(
                f"Task {self.kind!r}: expected non-empty splits, got {len(self.splits.train)} train and "
                f"{len(self.splits.validation)} validation examples"
            )
        if not self.alphabet or self.alphabet != "".join(sorted(set(self.alphabet))):
            raise ValueError(
                f"Task {self.kind!r}: expected a sorted alphabet without duplicates, got {self.alphabet!r}"
            )
        if self.max_answer_chars < 1 or self.response_tokens < 0:
            raise ValueError(
                f"Task {self.kind!r}: expected max_answer_chars >= 1 and response_tokens >= 0, got "
                f"{self.max_answer_chars}, {self.response_tokens}"
            )
        if self.tool is not None and self.tool.max_turns < 1:
            raise ValueError(f"Task {self.kind!r}: expected tool.max_turns >= 1, got {self.tool.max_turns}")
        used = {c for ex in (*self.splits.train, *self.splits.validation) for c in ex.prompt + ex.ground_truth}
        outside = sorted(used - set(self.alphabet))
        if outside:
            raise ValueError(f"Task {self.kind!r}: characters {outside[:10]} of the data are outside the alphabet")

    @property
    def max_char_bytes(self) -> int:
        """The most UTF-8 bytes of one alphabet character (1 for an ASCII alphabet)."""
        return max(len(c.encode()) for c in self.alphabet)

    def demonstration(self, example: TaskExample) -> tuple[Piece, ...]:
        """The warm-up's target after the prompt (checked: non-empty, ending with a trainable piece)."""
        return check_demonstration(self.demonstrate(example), example)

    def fingerprint(self) -> str:
        """A short stable hash of `kind`, `identity` and `prompt_format` (keys the warm-up cache)."""
        blob = json.dumps(
            {"kind": self.kind, "identity": self.identity, "prompt_format": self.prompt_format}, sort_keys=True
        ).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


class TaskBuilder(Protocol):
    """A task config: `build()` gives the Task (the same config always builds the same task)."""

    def build(self) -> Task: ...
