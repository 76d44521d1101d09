"""A backend's refusal of a model family it does not build (standard library only)."""

from __future__ import annotations


def family_refusal(kind: str, family: str, served: tuple[str, ...], reason: str = "") -> str:
    """ "" when `family` is in `served`, else why backend `kind` refuses it (with `reason` when one is known)."""
    if family in served:
        return ""
    because = f": {reason}" if reason else ""
    return f"backend.kind {kind} builds and maps {list(served)} models only, got a {family} model{because}"
