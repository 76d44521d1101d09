"""When a periodic action (validation, checkpoint) falls on a step: every `every` steps and always on the last."""

from __future__ import annotations


def due(step: int, every: int, last_step: int) -> bool:
    """True on multiples of `every` (`every` 0: never periodically) and on `last_step`, so a run always ends with
    the action done on its final weights."""
    return (every > 0 and step % every == 0) or step == last_step
