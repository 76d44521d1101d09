"""The calculator task: sum a few small numbers by calling an adding tool, then state the sum.

Each prompt lists `min_terms..max_terms` numbers; the expert episode (the warm-up's demonstration) adds them
left to right with one tool call per addition and answers `#<sum>` (format in `rl_tasks.calculator_env`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from rl_tasks.calculator_env import (
    CALCULATOR_ALPHABET,
    CALCULATOR_SOURCE,
    MAX_OPERAND_DIGITS,
    CalculatorEnv,
    format_answer,
    format_prompt,
)
from rl_tasks.calculator_reward import CalculatorReward
from rl_tasks.renderer import PROMPT_FORMAT_HELP, PromptFormat, check_prompt_format
from rl_tasks.task import Task, TaskSplits
from rl_tasks.unique_draws import draw_splits


@dataclass(frozen=True)
class CalculatorTaskConfig:
    """The number of terms is uniform in `[min_terms, max_terms]`; each term has a digit count uniform in
    `[min_digits, max_digits]` (`0..9` counts as one digit), then a value uniform among numbers with exactly
    that many digits. `train_size` and `val_size` count unique prompts; validation is drawn first, and no
    validation prompt is in train. `max_turns` is the expert's longest episode (`max_terms - 1` calls and one
    answer) plus `spare_turns`.

    The defaults (4 numbers of 1-4 digits) are chosen for the warm-up: numbers of mixed lengths are what it
    learns slowest (copying a partial sum or the next number into a call), so a 100-step base still fails often
    enough to leave RL room, while 200 steps show the tiny MoE can learn the task."""

    kind: Literal["calculator"] = "calculator"
    min_terms: int = field(default=4, metadata={"help": "fewest numbers to add"})
    max_terms: int = field(default=4, metadata={"help": "most numbers to add"})
    min_digits: int = field(default=1, metadata={"help": "fewest digits of a number"})
    max_digits: int = field(default=4, metadata={"help": "most digits of a number"})
    spare_turns: int = field(
        default=1, metadata={"help": "turns allowed beyond the expert's (max_terms - 1 tool calls and one answer)"}
    )
    train_size: int = field(default=20_000, metadata={"help": "unique training prompts"})
    val_size: int = field(default=256, metadata={"help": "unique validation prompts (none of them in train)"})
    seed: int = field(default=0, metadata={"help": "seeds the splits"})
    prompt_format: PromptFormat = field(default="chat", metadata=PROMPT_FORMAT_HELP)

    def __post_init__(self) -> None:
        if self.kind != "calculator":
            raise ValueError(f"CalculatorTaskConfig.kind: expected 'calculator', got {self.kind!r}")
        check_prompt_format(self.prompt_format)
        if not 2 <= self.min_terms <= self.max_terms:
            raise ValueError(
                f"CalculatorTaskConfig: expected 2 <= min_terms <= max_terms, got {self.min_terms}, {self.max_terms}"
            )
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(
                f"CalculatorTaskConfig: expected 1 <= min_digits <= max_digits, got {self.min_digits}, "
                f"{self.max_digits}"
            )
        if self.max_operand_digits > MAX_OPERAND_DIGITS:
            raise ValueError(
                f"CalculatorTaskConfig: expected sums of at most {MAX_OPERAND_DIGITS} digits (the tool's operand "
                f"limit), got max_terms={self.max_terms}, max_digits={self.max_digits}"
            )
        if self.spare_turns < 0 or self.train_size < 1 or self.val_size < 1:
            raise ValueError(
                f"CalculatorTaskConfig: expected spare_turns >= 0, train_size >= 1, val_size >= 1, got "
                f"{self.spare_turns}, {self.train_size}, {self.val_size}"
            )

    @property
    def max_turns(self) -> int:
        return self.max_terms + self.spare_turns

    @property
    def max_operand_digits(self) -> int:
        """The digits of the largest sum: no expert call has a longer operand."""
        return len(str(self.max_terms * (10**self.max_digits - 1)))

    @property
    def max_answer_chars(self) -> int:
        """The longest expert turn: the last call (the largest partial sum `+` the largest term) or the
        final answer, whichever is longer."""
        largest = 10**self.max_digits - 1
        last_call = len(str((self.max_terms - 1) * largest)) + 1 + self.max_digits
        answer = len(format_answer(self.max_terms * largest))
        return max(last_call, answer)

    def _term(self, rng: np.random.Generator) -> int:
        digits = int(rng.integers(self.min_digits, self.max_digits + 1))
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return int(rng.integers(low, 10**digits))

    def _draw(self, rng: np.random.Generator) -> tuple[str, str, str]:
        terms = tuple(self._term(rng) for _ in range(int(rng.integers(self.min_terms, self.max_terms + 1))))
        return CALCULATOR_SOURCE, format_prompt(terms), str(sum(terms))

    def build_splits(self) -> TaskSplits:
        return draw_splits("CalculatorTaskConfig", self._draw, self.seed, self.val_size, self.train_size)

    def build(self) -> Task:
        env = CalculatorEnv(max_turns=self.max_turns, max_operand_digits=self.max_operand_digits)
        return Task(
            kind="calculator",
            splits=self.build_splits(),
            reward_fn=CalculatorReward(),
            alphabet=CALCULATOR_ALPHABET,
            max_answer_chars=self.max_answer_chars,
            tool=env,
            demonstrate=env.demonstration,
            identity=dataclasses.asdict(self),
            prompt_format=self.prompt_format,
        )
