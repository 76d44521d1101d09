"""Engines by kind. A section's `kind` (`rollout.engine.kind`, `teacher.engine.kind`) names the engine built from
it; the section lives here, standard library only, and never imports its engine: each engine package registers its
opener under an entry-point group in its own `pyproject.toml`, and `open_registered` finds it by kind. So a trainer
that builds its engines from sections imports no engine, and an engine that is not installed is an error naming
the package to install, never a silent fallback.

Groups and who registers what (`[project.entry-points."<group>"]` of each package):
- `moe_rl.rollout_engines`: `native` (`engine-adapters[native]`), `vllm` and `sglang` (engine-adapters); called
  with `(section, site: RolloutSite)`, returning a `RolloutEngine` (or an awaitable of one);
- `moe_rl.teacher_engines`: `native`, `vllm` (engine-adapters); `(section, site: TeacherSite)`;
- `moe_rl.greedy_evaluators`: `native` (the native engine's greedy decoding over its KV cache, what the warm-up's
  evaluation runs).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

ROLLOUT_ENGINES = "moe_rl.rollout_engines"
TEACHER_ENGINES = "moe_rl.teacher_engines"
GREEDY_EVALUATORS = "moe_rl.greedy_evaluators"

PROVIDERS: dict[str, dict[str, str]] = {
    ROLLOUT_ENGINES: {"native": "engine-adapters[native]", "vllm": "engine-adapters", "sglang": "engine-adapters"},
    TEACHER_ENGINES: {"native": "engine-adapters[native]", "vllm": "engine-adapters"},
    GREEDY_EVALUATORS: {"native": "engine-adapters[native]"},
}


def registered(group: str, kind: str) -> Callable[..., Any]:
    """The object registered as `kind` in `group` (loaded, so its module is imported now). LookupError when no
    installed package registers it, naming the one that does; ValueError when two register different objects."""
    found = {ep.value: ep for ep in entry_points(group=group) if ep.name == kind}
    if not found:
        kinds = sorted({ep.name for ep in entry_points(group=group)})
        provider = PROVIDERS.get(group, {}).get(kind)
        hint = f"install {provider}" if provider else "no package of this project provides it"
        raise LookupError(f"{group}: no implementation of kind {kind!r} is installed ({hint}); installed: {kinds}")
    if len(found) > 1:
        raise ValueError(f"{group}: kind {kind!r} is registered more than once: expected one, got {sorted(found)}")
    (entry,) = found.values()
    return entry.load()


async def open_registered(group: str, section: Any, site: Any) -> Any:
    """The engine built by the opener registered as `section.kind` in `group`, from `section` for `site`."""
    built = registered(group, section.kind)(section, site)
    return await built if inspect.isawaitable(built) else built
