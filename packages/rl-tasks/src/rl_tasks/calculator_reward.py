"""Exact reward of the calculator task: the last model turn must be `#<the sum>`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rl_tasks.calculator_env import ANSWER_START, RESULT_END
from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardResult

_ANSWER = re.compile(rf"{re.escape(ANSWER_START)}([0-9]+)")


def final_answer(response_text: str) -> str | None:
    """The digits of the final answer: the text after the last observation (or the whole response when there
    is none) must be exactly `#<digits>`; None otherwise (no answer, a malformed one, or a trailing call)."""
    answer = _ANSWER.fullmatch(response_text.rsplit(RESULT_END, 1)[-1])
    return None if answer is None else answer[1]


@dataclass(frozen=True)
class CalculatorReward:
    """`correct` iff the final answer's digits equal the ground truth exactly (no leading zeros, no
    whitespace), else `incorrect`; `pred` is the final answer's digits (None when there is none)."""

    correct: float = 1.0
    incorrect: float = 0.0

    def __call__(self, response_text: str, example: TaskExample) -> RewardResult:
        if not isinstance(response_text, str):
            raise ValueError(f"CalculatorReward: expected response_text str, got {type(response_text).__name__}")
        pred = final_answer(response_text)
        hit = pred == example.ground_truth
        return RewardResult(reward=self.correct if hit else self.incorrect, acc=1.0 if hit else 0.0, pred=pred)
