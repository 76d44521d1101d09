"""Building a config: dataclass defaults, then a TOML file, then `--section.key value` (last wins)."""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
import typing
from pathlib import Path
from typing import Any, TypeVar

from run_config.fields import Leaf, convert, is_config, leaves, section_default

C = TypeVar("C")


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _build(cls: type[C], values: dict[str, Any], prefix: str = "", base: Any = None) -> C:
    """`cls` from `values` (dotted keys); unset fields keep `base`'s values, else the declared defaults."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f"{prefix}{f.name}"
        if is_config(hints[f.name]):
            kwargs[f.name] = _build(hints[f.name], values, key + ".", section_default(f, base))
        elif key in values:
            kwargs[f.name] = values[key]
        elif base is not None:
            kwargs[f.name] = getattr(base, f.name)
    return cls(**kwargs)


def from_dict(cls: type[C], table: dict[str, Any], *, source: str = "config") -> C:
    """A config from nested tables (TOML-shaped); unknown keys are an error naming the known ones."""
    known = {leaf.key: leaf for leaf in leaves(cls)}
    flat = _flatten(table)
    unknown = sorted(set(flat) - set(known))
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {unknown}; expected keys among {sorted(known)}")
    return _build(cls, {k: convert(v, known[k].kind, k) for k, v in flat.items()})


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> list[Leaf]:
    """Adds `--config FILE` and one `--section.key` option per leaf field, its help showing the default."""
    parser.add_argument("--config", type=Path, default=None, help="TOML file of overrides (defaults < file < flags)")
    all_leaves = leaves(cls)
    for leaf in all_leaves:
        default = "required" if leaf.default is dataclasses.MISSING else repr(leaf.default)
        parser.add_argument(
            f"--{leaf.key}", dest=leaf.key, default=None, metavar="V", help=f"{leaf.help} (default: {default})"
        )
    return all_leaves


def resolve(cls: type[C], args: argparse.Namespace) -> C:
    """The config from parsed arguments: defaults, then `args.config` (TOML), then explicit flags."""
    table: dict[str, Any] = {}
    if args.config is not None:
        if not args.config.is_file():
            raise ValueError(f"--config: expected an existing TOML file, got {str(args.config)!r}")
        table = _flatten(tomllib.loads(args.config.read_text()))
    for leaf in leaves(cls):
        value = getattr(args, leaf.key, None)
        if value is not None:
            table[leaf.key] = value
    nested: dict[str, Any] = {}
    for key, value in table.items():
        node = nested
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return from_dict(cls, nested, source=str(args.config) if args.config else "command line")


def parse_config(cls: type[C], argv: list[str] | None = None, *, description: str = "") -> C:
    """Parses `argv` (default `sys.argv[1:]`) into a `cls` config; `--help` lists every key."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, cls)
    return resolve(cls, parser.parse_args(argv))
