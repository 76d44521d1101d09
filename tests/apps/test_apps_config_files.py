"""The recipe files in `configs/` stay valid for both apps: every key they set is a real key, parsed to the value
the file gives (a renamed key or a changed section would break `--config configs/<file>` for users)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from async_ppo.cli import parse as parse_async
from run_lifecycle import to_dict
from sync_ppo.cli import parse as parse_sync

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.toml"))


def _leaves(table: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_there_are_recipe_files() -> None:
    assert [p.name for p in CONFIGS] == ["longtail.toml", "longtail_small_steps.toml", "opd.toml"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
@pytest.mark.parametrize("parse", [parse_sync, parse_async], ids=["sync_ppo", "async_ppo"])
def test_each_recipe_file_parses_in_both_apps_to_the_values_it_sets(path: Path, parse, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = parse(["--config", str(path), "--run.dir", str(tmp_path / "run")])
    resolved = _leaves(to_dict(cfg))
    for key, value in _leaves(tomllib.loads(path.read_text())).items():
        assert resolved[key] == pytest.approx(value) if isinstance(value, float) else resolved[key] == value, key
