"""`due`: every k steps and always the last one."""

from __future__ import annotations

from run_lifecycle import due


def test_due_on_multiples_and_at_the_last_step() -> None:
    assert [s for s in range(1, 8) if due(s, 3, 7)] == [3, 6, 7]


def test_every_zero_is_due_only_at_the_last_step() -> None:
    assert [s for s in range(1, 6) if due(s, 0, 5)] == [5]


def test_the_last_step_on_a_multiple_is_due_once() -> None:
    assert [s for s in range(1, 7) if due(s, 3, 6)] == [3, 6]
