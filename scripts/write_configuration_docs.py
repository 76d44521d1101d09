"""Writes docs/configuration.md (the PPO apps) and docs/configuration_flow_grpo.md (apps/flow_grpo) from the apps'
typed configs: `uv run python scripts/write_configuration_docs.py`.

tests/apps/test_apps_configuration_docs.py fails when a committed file differs from `render()` /
`render_flow()`, so the references cannot drift from the code.
"""

from __future__ import annotations

from pathlib import Path

from async_pipeline.async_ppo.config import AsyncConfig
from flow_grpo.config import FlowConfig
from run_lifecycle import to_markdown

OUT = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
OUT_FLOW = OUT.with_name("configuration_flow_grpo.md")

INTRO = """\
Generated from the typed configs by `uv run python scripts/write_configuration_docs.py`; a test keeps it equal to
the code. `apps/sync_ppo` has every section below except `pipeline`, `ray` and `faults`, which only
`apps/async_ppo` has; both print the same with `--help`. A run writes its resolved config to
`<run dir>/config.toml`, which `--resume` reads back as the base of the settings.

A tagged section (`task`, `rollout.engine`, `algorithm`, `backend`) has one table per kind: choose the kind with
`--<section>.kind KIND` (or `--<section> KIND`, or `kind = "KIND"` in its TOML table); a key that the chosen kind
does not have is an error that names the kinds that have it.
"""


INTRO_FLOW = """\
Generated from the typed config of `apps/flow_grpo` by `uv run python scripts/write_configuration_docs.py`; a test
keeps it equal to the code, and `uv run apps/flow_grpo --help` prints the same. A run writes its resolved config to
`<run dir>/config.toml`, which `--resume` reads back. The `reward` section is tagged: choose it with
`--reward.kind KIND`. What the settings mean is in docs/flow_grpo.md.
"""


def _with_intro(cls: type, title: str, intro: str) -> str:
    head, generic, rest = to_markdown(cls, title=title).split("\n\n", 2)
    return f"{head}\n\n{intro}\n{generic}\n\n{rest}"


def render() -> str:
    return _with_intro(AsyncConfig, "Configuration reference", INTRO)


def render_flow() -> str:
    return _with_intro(FlowConfig, "Configuration reference: apps/flow_grpo", INTRO_FLOW)


if __name__ == "__main__":
    OUT.parent.mkdir(exist_ok=True)
    for path, text in ((OUT, render()), (OUT_FLOW, render_flow())):
        path.write_text(text)
        print(f"wrote {path} ({len(text.splitlines())} lines)")
