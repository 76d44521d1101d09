"""Exact-match reward for the toy tasks (the whole response must be the answer)."""

from __future__ import annotations

from dataclasses import dataclass

from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardResult


@dataclass(frozen=True)
class ExactMatchReward:
    """Reward `correct` when the response, stripped of surrounding whitespace, equals the ground truth,
    else `incorrect`. `acc` is 1.0 or 0.0; `pred` is the stripped response (None if empty)."""

    correct: float = 1.0
    incorrect: float = 0.0

    def __call__(self, response_text: str, example: TaskExample) -> RewardResult:
        if not isinstance(response_text, str):
            raise ValueError(f"ExactMatchReward: expected response_text str, got {type(response_text).__name__}")
        pred = response_text.strip()
        hit = pred == example.ground_truth
        return RewardResult(reward=self.correct if hit else self.incorrect, acc=1.0 if hit else 0.0, pred=pred or None)
