"""Routes each example to the reward function registered for its data source."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardFn, RewardResult


class UnknownDataSourceError(ValueError):
    """An example's data source has no registered reward function."""


@dataclass(frozen=True)
class RewardByDataSource:
    """A RewardFn that dispatches on `example.data_source`; an unregistered source raises (which
    `score_safely` turns into an error record), never a default score."""

    fns: Mapping[str, RewardFn]

    def __post_init__(self) -> None:
        if not self.fns:
            raise ValueError("RewardByDataSource: expected at least one data source, got none")

    def __call__(self, response_text: str, example: TaskExample) -> RewardResult:
        fn = self.fns.get(example.data_source)
        if fn is None:
            raise UnknownDataSourceError(
                f"no reward function for data_source {example.data_source!r}; expected one of {sorted(self.fns)}"
            )
        return fn(response_text, example)
