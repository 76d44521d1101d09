"""The scratchpad task: digit sorting answered after a selection-sort trace (`rl_tasks.sort_trace`), whose
response lengths have a long tail. It is the generation-bound workload: a few long traces decide how long a
synchronous step generates, which is what fully asynchronous training with partial rollout hides."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from rl_tasks.dispatch import RewardByDataSource
from rl_tasks.example import TaskExample
from rl_tasks.renderer import PROMPT_FORMAT_HELP, PromptFormat, check_prompt_format
from rl_tasks.sort_trace import FinalAnswerReward, SortTraceSource, prompt_digits, sort_trace
from rl_tasks.task import Piece, Task, TaskSplits
from rl_tasks.unique_draws import draw_splits


def trace_demonstration(example: TaskExample) -> tuple[Piece, ...]:
    """The warm-up's target: the whole trace and answer as one model turn."""
    return (Piece(sort_trace(prompt_digits(example.prompt)), trainable=True),)


@dataclass(frozen=True)
class ScratchpadTaskConfig:
    """`train_size` and `val_size` count unique prompts; validation is drawn first and none of its prompts is
    in train. The same config always yields the same splits."""

    kind: Literal["scratchpad"] = "scratchpad"
    sort: SortTraceSource = field(default_factory=SortTraceSource, metadata={"help": "the traced sorting source"})
    train_size: int = field(default=20_000, metadata={"help": "unique training prompts"})
    val_size: int = field(default=256, metadata={"help": "unique validation prompts (none of them in train)"})
    seed: int = field(default=0, metadata={"help": "seeds the splits"})
    prompt_format: PromptFormat = field(default="chat", metadata=PROMPT_FORMAT_HELP)

    def __post_init__(self) -> None:
        if self.kind != "scratchpad":
            raise ValueError(f"ScratchpadTaskConfig.kind: expected 'scratchpad', got {self.kind!r}")
        check_prompt_format(self.prompt_format)
        if self.train_size < 1 or self.val_size < 1:
            raise ValueError(
                f"ScratchpadTaskConfig: expected train_size >= 1 and val_size >= 1, got {self.train_size}, "
                f"{self.val_size}"
            )

    def _draw(self, rng: np.random.Generator) -> tuple[str, str, str]:
        prompt, answer = self.sort.sample(rng)
        return self.sort.name, prompt, answer

    def build_splits(self) -> TaskSplits:
        return draw_splits("ScratchpadTaskConfig", self._draw, self.seed, self.val_size, self.train_size)

    def build(self) -> Task:
        return Task(
            kind="scratchpad",
            splits=self.build_splits(),
            reward_fn=RewardByDataSource({self.sort.name: FinalAnswerReward()}),
            alphabet=self.sort.alphabet,
            max_answer_chars=self.sort.max_answer_chars,
            tool=None,
            demonstrate=trace_demonstration,
            identity=dataclasses.asdict(self),
            prompt_format=self.prompt_format,
        )
