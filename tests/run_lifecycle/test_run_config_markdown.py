"""`to_markdown`: the configuration reference, one heading and table per section and per kind, byte-stable."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
from run_config_examples import App, Required, Rollout
from run_lifecycle import to_markdown
from run_lifecycle.markdown import type_name


@dataclass(frozen=True)
class Small:
    seed: int = field(default=0, metadata={"help": "seeds a | b"})
    betas: tuple[float, ...] = (0.9, 0.999)
    rollout: Rollout = field(default_factory=Rollout)


SMALL = """\
# Small reference

Each key is set by `--<key> V` on the command line or as `<name> = V` in the TOML table of its section \
(`--config FILE`); defaults < file < flags.

## top-level keys

| key | type | default | description |
|---|---|---|---|
| `seed` | int | `0` | seeds a \\| b |
| `betas` | list of float | `[0.9, 0.999]` |  |

## rollout

| key | type | default | description |
|---|---|---|---|
| `rollout.samples` | int | `8` | responses per prompt |

## rollout.engine (kind: native | vllm)

the rollout engine

Chosen by `rollout.engine.kind` (short: `--rollout.engine KIND`, or `rollout.engine = "KIND"` in TOML); default: \
`native`.

### rollout.engine (kind = native, the default)

| key | type | default | description |
|---|---|---|---|
| `rollout.engine.slots` | int | `256` | KV-cache slots |

### rollout.engine (kind = vllm)

| key | type | default | description |
|---|---|---|---|
| `rollout.engine.url` | str or none | `none` | server URL; none: launch one |
| `rollout.engine.slots` | int | `64` | KV-cache slots |
"""


def test_markdown_has_a_table_per_section_and_per_kind():
    assert to_markdown(Small, title="Small reference") == SMALL


def test_nested_tagged_sections_get_headings_under_their_enclosing_kind():
    headings = [line for line in to_markdown(App, title="App").splitlines() if line.startswith("#")]
    assert headings[:8] == [
        "# App",
        "## top-level keys",
        "## algorithm (kind: ppo | gspo | decoupled)",
        "### algorithm (kind = ppo, the default)",
        "#### algorithm.kl (algorithm.kind = ppo)",
        "#### algorithm.baseline (kind: zero | mean; algorithm.kind = ppo)",
        "##### algorithm.baseline (kind = zero, the default; algorithm.kind = ppo)",
        "##### algorithm.baseline (kind = mean; algorithm.kind = ppo)",
    ]
    assert "### algorithm (kind = decoupled)" in headings and "## backend (kind: torch)" in headings


def test_each_kinds_table_shows_that_kinds_defaults():
    text = to_markdown(App, title="App")
    gspo = text.split("### algorithm (kind = gspo)")[1].split("###")[0]
    assert "| `algorithm.clip` | float | `0.0003` |  |" in gspo and "is_cap" not in gspo
    decoupled = text.split("### algorithm (kind = decoupled)")[1].split("## rollout")[0]
    assert "| `algorithm.is_cap` | float | `0.0` | behaviour weight cap (0: off) |" in decoupled
    assert "| `algorithm.baseline.window` | int | `4` | groups averaged |" in decoupled


def test_a_required_tagged_section_says_so():
    assert "Chosen by `engine.kind`" in to_markdown(Required, title="R") and "default: required." in to_markdown(
        Required, title="R"
    )


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        (int, "int"),
        (float, "float"),
        (bool, "bool"),
        (str, "str"),
        (Literal["a", "b"], "one of: a, b"),
        (tuple[int, ...], "list of int"),
        (list[float], "list of float"),
        (int | None, "int or none"),
        (Literal["x"] | None, "one of: x or none"),
    ],
)
def test_types_are_printed_readably(kind, name):
    assert type_name(kind) == name


def test_markdown_is_the_same_under_every_hash_seed():
    code = (
        "from run_lifecycle import to_markdown; from run_config_examples import App; print(to_markdown(App, title='A'))"
    )
    here = str(Path(__file__).resolve().parent)
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": here},
        ).stdout
        for seed in ("0", "1", "4242")
    }
    assert outputs == {to_markdown(App, title="A") + "\n"}
