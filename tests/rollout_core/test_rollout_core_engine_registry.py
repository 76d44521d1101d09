"""The registry of engines by kind: a section's `kind` finds the opener an installed package registered, awaited
when it is a coroutine; a kind nobody registered fails naming the package to install; two different objects
registered under one kind fail too."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from importlib.metadata import EntryPoint

import pytest
from rollout_core import engine_registry
from rollout_core.engine_registry import ROLLOUT_ENGINES, TEACHER_ENGINES, open_registered, registered


def fake_entry_points(*points: tuple[str, str, str]):
    def entry_points(group: str) -> list[EntryPoint]:
        return [EntryPoint(name, value, g) for g, name, value in points if g == group]

    return entry_points


@dataclass
class Section:
    kind: str


def sync_opener(section: Section, site: str) -> tuple[str, str]:
    return ("sync", f"{section.kind}@{site}")


async def async_opener(section: Section, site: str) -> tuple[str, str]:
    return ("async", f"{section.kind}@{site}")


def test_a_registered_kind_opens_its_engine_sync_or_async(monkeypatch: pytest.MonkeyPatch) -> None:
    here = __name__
    monkeypatch.setattr(
        engine_registry,
        "entry_points",
        fake_entry_points(
            (ROLLOUT_ENGINES, "native", f"{here}:sync_opener"), (ROLLOUT_ENGINES, "vllm", f"{here}:async_opener")
        ),
    )
    assert asyncio.run(open_registered(ROLLOUT_ENGINES, Section("native"), "s0")) == ("sync", "native@s0")
    assert asyncio.run(open_registered(ROLLOUT_ENGINES, Section("vllm"), "s1")) == ("async", "vllm@s1")
    assert registered(ROLLOUT_ENGINES, "native") is sync_opener


def test_a_kind_nobody_registered_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_registry, "entry_points", fake_entry_points((ROLLOUT_ENGINES, "native", "x:y")))
    with pytest.raises(
        LookupError, match=r"kind 'vllm' is installed \(install engine-adapters\); installed: \['native'\]"
    ):
        registered(ROLLOUT_ENGINES, "vllm")
    with pytest.raises(LookupError, match="no package of this project provides it"):
        registered(TEACHER_ENGINES, "sglang")


def test_one_kind_registered_twice_with_different_objects_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    here = __name__
    monkeypatch.setattr(
        engine_registry,
        "entry_points",
        fake_entry_points(
            (ROLLOUT_ENGINES, "native", f"{here}:sync_opener"),
            (ROLLOUT_ENGINES, "native", f"{here}:async_opener"),
            (ROLLOUT_ENGINES, "vllm", f"{here}:sync_opener"),
            (ROLLOUT_ENGINES, "vllm", f"{here}:sync_opener"),  # the same object twice (a package found twice) is fine
        ),
    )
    with pytest.raises(ValueError, match="registered more than once"):
        registered(ROLLOUT_ENGINES, "native")
    assert registered(ROLLOUT_ENGINES, "vllm") is sync_opener
