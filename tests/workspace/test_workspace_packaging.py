"""Every workspace member can be published on its own: its pyproject names a readme that exists, the MIT license as
an SPDX expression and a LICENSE file that is the repository's, and its README says how to test it alone."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = sorted(p.parent for p in ROOT.glob("*/*/pyproject.toml") if p.parent.parent.name in ("packages", "apps"))


def test_the_workspace_has_its_twelve_members() -> None:
    assert len(MEMBERS) == 12, [m.name for m in MEMBERS]


@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: m.name)
def test_a_member_declares_its_readme_and_the_mit_license_with_the_repository_license_file(member: Path) -> None:
    project = tomllib.loads((member / "pyproject.toml").read_text())["project"]
    assert project.get("readme") == "README.md", project.get("readme")
    assert (member / "README.md").is_file()
    assert project.get("license") == "MIT", project.get("license")
    assert project.get("license-files") == ["LICENSE"], project.get("license-files")
    assert (member / "LICENSE").read_text() == (ROOT / "LICENSE").read_text(), f"{member.name}/LICENSE differs"


@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: m.name)
def test_a_member_readme_gives_the_isolated_test_commands(member: Path) -> None:
    name = tomllib.loads((member / "pyproject.toml").read_text())["project"]["name"]
    text = (member / "README.md").read_text()
    assert f"uv sync --locked --package {name}" in text, f"{member.name}/README.md: no isolated sync of {name}"
    assert "uv run --no-sync pytest tests/" in text, f"{member.name}/README.md: no isolated test command"
