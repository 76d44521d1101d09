"""docs/configuration.md and docs/configuration_flow_grpo.md are exactly what the typed configs render to: a key
added, removed or re-documented in the code without regenerating the files fails here (regenerate: `uv run python
scripts/write_configuration_docs.py`)."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_configuration_reference_matches_the_typed_configs() -> None:
    render = runpy.run_path(str(ROOT / "scripts" / "write_configuration_docs.py"))["render"]
    committed = (ROOT / "docs" / "configuration.md").read_text()
    expected = render()
    assert committed == expected, (
        "docs/configuration.md is stale: run `uv run python scripts/write_configuration_docs.py` and commit it"
    )


def test_the_flow_grpo_configuration_reference_matches_its_typed_config() -> None:
    render = runpy.run_path(str(ROOT / "scripts" / "write_configuration_docs.py"))["render_flow"]
    assert (ROOT / "docs" / "configuration_flow_grpo.md").read_text() == render(), (
        "docs/configuration_flow_grpo.md is stale: run `uv run python scripts/write_configuration_docs.py`"
    )


def test_every_key_of_both_apps_is_in_the_reference() -> None:
    from async_pipeline.async_ppo.config import AsyncConfig
    from run_lifecycle import leaves
    from trainers.sync_ppo.config import SyncConfig

    text = (ROOT / "docs" / "configuration.md").read_text()
    keys = {leaf.key for cls in (SyncConfig, AsyncConfig) for leaf in leaves(cls)}
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert not missing, missing
