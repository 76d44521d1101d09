"""Writes docs/configuration.md from the apps' typed configs: `uv run python scripts/write_configuration_docs.py`.

tests/apps/test_apps_configuration_docs.py fails when the committed file differs from `render()`, so the reference
cannot drift from the code.
"""

from __future__ import annotations

from pathlib import Path

from async_ppo.config import AsyncConfig
from run_config import to_markdown

OUT = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

INTRO = """\
Generated from the typed configs by `uv run python scripts/write_configuration_docs.py`; a test keeps it equal to
the code. `apps/sync_ppo` has every section below except `pipeline`, `ray` and `faults`, which only
`apps/async_ppo` has; both print the same with `--help`. A run writes its resolved config to
`<run dir>/config.toml`, which `--resume` reads back as the base of the settings.

A tagged section (`task`, `rollout.engine`, `algorithm`, `backend`) has one table per kind: choose the kind with
`--<section>.kind KIND` (or `--<section> KIND`, or `kind = "KIND"` in its TOML table); a key that the chosen kind
does not have is an error that names the kinds that have it.
"""


def render() -> str:
    title, generic, rest = to_markdown(AsyncConfig, title="Configuration reference").split("\n\n", 2)
    return f"{title}\n\n{INTRO}\n{generic}\n\n{rest}"


if __name__ == "__main__":
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {OUT} ({len(render().splitlines())} lines)")
