"""`help_field`: a config field with its default and help text, for rollout-core's sections (the engines'). The
apps' other sections use `run_lifecycle.fields.help_field`, the same two lines: rollout-core depends on no run
machinery, so it keeps its own."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def help_field(text: str, default: object) -> Any:
    """A config field with a default and its help text (`--help`, docs/configuration.md)."""
    return field(default=default, metadata={"help": text})
