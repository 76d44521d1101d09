"""The command line of a config: `--config FILE` and one `--section.key V` option per key, grouped by section.

Every tagged section also gets `--section KIND`, short for `--section.kind KIND`. Options are always spelled in
full: `add_arguments` turns off argparse's prefix matching, so `--algorithm` is never read as `--algorithm.x`.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
import typing
from pathlib import Path
from typing import Any, TypeVar

from run_lifecycle.fields import Leaf, leaves
from run_lifecycle.loader import build_flat, flatten, layer

C = TypeVar("C")


def _shown(value: Any) -> str:
    return "required" if value is dataclasses.MISSING else repr(value)


def _defaults_text(leaf: Leaf) -> str:
    shown = {kind: _shown(v) for kind, v in leaf.defaults.items()}
    if len(set(shown.values())) > 1:
        return "default: " + ", ".join(f"{kind}={v}" for kind, v in shown.items())
    return f"default: {_shown(leaf.default)}"


def help_text(leaf: Leaf, kinds_of: dict[str, tuple[str, ...]]) -> str:
    """A key's help: its text, the kinds of its tagged section that have it (when not all do) and its default,
    per kind where the kinds' defaults differ. `kinds_of` maps each tagged section to all its kinds."""
    parts = [leaf.help] if leaf.help else []
    if leaf.chooses:
        parts.append("one of: " + " | ".join(str(c) for c in typing.get_args(leaf.kind)))
    text = ", ".join(parts)
    notes = []
    if leaf.within and leaf.kinds != kinds_of[leaf.within]:
        notes.append(f"{leaf.within}.kind: " + ", ".join(leaf.kinds))
    notes.append(_defaults_text(leaf))
    return (text + " " if text else "") + f"({'; '.join(notes)})"


def _title(section: str, kinds_of: dict[str, tuple[str, ...]]) -> str:
    if section in kinds_of:
        return f"{section} (kind: {' | '.join(kinds_of[section])})"
    return section


def option_keys(all_leaves: list[Leaf]) -> list[str]:
    """The dests of the config's options: every key, and every tagged section (its shorthand)."""
    out: list[str] = []
    for leaf in all_leaves:
        if leaf.chooses:
            out.append(leaf.section)
        out.append(leaf.key)
    return out


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> list[Leaf]:
    """Adds `--config FILE`, one `--key V` option per distinct key of `cls` and `--section KIND` per tagged
    section, each section's options in an argument group titled with the section (and its kinds); sets
    `parser.allow_abbrev = False`. Returns the leaves."""
    parser.allow_abbrev = False
    parser.add_argument("--config", type=Path, default=None, help="TOML file of overrides (defaults < file < flags)")
    all_leaves = leaves(cls)
    kinds_of = {leaf.section: tuple(map(str, typing.get_args(leaf.kind))) for leaf in all_leaves if leaf.chooses}
    groups: dict[str, Any] = {"": parser}
    for leaf in all_leaves:
        section = leaf.section
        if section not in groups:
            groups[section] = parser.add_argument_group(_title(section, kinds_of))
        escaped = help_text(leaf, kinds_of).replace("%", "%%")
        if leaf.chooses:
            groups[section].add_argument(
                f"--{section}", dest=section, default=None, metavar="KIND", help=f"short for --{leaf.key}"
            )
        metavar = "KIND" if leaf.chooses else "V"
        groups[section].add_argument(f"--{leaf.key}", dest=leaf.key, default=None, metavar=metavar, help=escaped)
    return all_leaves


def resolve(cls: type[C], args: argparse.Namespace, *, base: C | None = None) -> C:
    """The config from parsed arguments: `base` (default: the declared defaults), then `args.config` (TOML), then
    explicit flags, as successive layers (a flag choosing another kind drops the file's keys of that section)."""
    file_flat: dict[str, Any] = {}
    if args.config is not None:
        if not args.config.is_file():
            raise ValueError(f"--config: expected an existing TOML file, got {str(args.config)!r}")
        file_flat = flatten(tomllib.loads(args.config.read_text()))
    flags = {k: v for k in option_keys(leaves(cls)) if (v := getattr(args, k, None)) is not None}
    flat = layer(cls, file_flat, flags, base)
    return build_flat(cls, flat, source=str(args.config) if args.config else "command line", base=base)


def parse_config(cls: type[C], argv: list[str] | None = None, *, description: str = "", base: C | None = None) -> C:
    """Parses `argv` (default `sys.argv[1:]`) into a `cls` config over `base`; `--help` lists every key."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, cls)
    return resolve(cls, parser.parse_args(argv), base=base)
