"""`run.torch_threads`: a set count is the trainer's; 0 gives a trainer that runs alone (sync_ppo: its engine waits
while it trains) every core the process may use, and one with rollouts alongside (async_ppo) one thread."""

from __future__ import annotations

import os

import pytest
from run_lifecycle.run_section import RunConfig


def test_zero_threads_mean_every_usable_core_alone_and_one_alongside_rollouts() -> None:
    cores = len(os.sched_getaffinity(0))
    assert RunConfig().torch_threads == 0
    assert RunConfig().trainer_threads(alone=True) == cores
    assert RunConfig().trainer_threads(alone=False) == 1
    assert RunConfig(torch_threads=3).trainer_threads(alone=True) == 3
    assert RunConfig(torch_threads=3).trainer_threads(alone=False) == 3


def test_negative_threads_are_refused() -> None:
    with pytest.raises(ValueError, match="torch_threads >= 0"):
        RunConfig(torch_threads=-1)
