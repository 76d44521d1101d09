"""The configuration reference of a config class as Markdown: one heading per section, a table of its keys.

The text depends only on the declarations (order, types, defaults, help), never on hashing, so a committed copy
can be compared with a fresh one.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from run_lifecycle.fields import unwrap_optional
from run_lifecycle.schema import TAG, FieldSpec, member_base, section_default, specs, value_default
from run_lifecycle.writer import toml_value

HEADER = ["| key | type | default | description |", "|---|---|---|---|"]


def type_name(kind: Any) -> str:
    """A key's type for people: `int`, `one of: a, b`, `list of float`, `str or none`."""
    inner, optional = unwrap_optional(kind)
    origin = typing.get_origin(inner)
    if origin is Literal:
        text = "one of: " + ", ".join(str(c) for c in typing.get_args(inner))
    elif origin in (tuple, list):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        text = f"list of {type_name(args[0]) if args else 'str'}"
    elif isinstance(inner, type):
        text = inner.__name__
    else:
        text = str(inner)
    return f"{text} or none" if optional else text


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(value: Any) -> str:
    if value is dataclasses.MISSING:
        return "required"
    return "`none`" if value is None else f"`{toml_value(value)}`"


def _heading(level: int, path: str, notes: list[str]) -> str:
    return "#" * min(level, 6) + f" {path}" + (f" ({'; '.join(notes)})" if notes else "")


def _row(spec: FieldSpec, key: str, base: Any) -> str:
    help_text = str(spec.field.metadata.get("help", ""))
    cells = [f"`{key}`", type_name(spec.hint), _default(value_default(spec.field, base)), help_text]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _section(
    cls: type, path: str, base: Any, level: int, context: list[str], out: list[str], *, member: bool = False
) -> None:
    """`path`'s table (under a heading unless it is a member, whose heading is written by its tagged section),
    then its nested sections; `context` names the kinds chosen above it."""
    prefix = f"{path}." if path else ""
    rows = [
        _row(spec, prefix + spec.name, base)
        for spec in specs(cls)
        if spec.section is None and spec.members is None and not (member and spec.name == TAG)
    ]
    if rows:
        if not member:
            out += [_heading(level, path or "top-level keys", context), ""]
        out += [*HEADER, *rows, ""]
    elif member:
        out += [f"No keys besides `{path}.{TAG}`.", ""]
    inner = level + 1 if member else level  # a member's sections sit below its heading
    for spec in specs(cls):
        key = prefix + spec.name
        if spec.members is not None:
            _tagged(spec, key, section_default(spec.field, base), inner, context, out)
        elif spec.section is not None:
            _section(spec.section, key, section_default(spec.field, base), inner, context, out)


def _tagged(spec: FieldSpec, path: str, section: Any, level: int, context: list[str], out: list[str]) -> None:
    assert spec.members is not None
    default_kind = None if section is None else str(getattr(section, TAG))
    help_text = str(spec.field.metadata.get("help", ""))
    chosen = f'Chosen by `{path}.{TAG}` (short: `--{path} KIND`, or `{path} = "KIND"` in TOML)'
    default = "required" if default_kind is None else f"`{default_kind}`"
    out += [_heading(level, path, [f"kind: {' | '.join(spec.members)}", *context]), ""]
    if help_text:
        out += [_cell(help_text), ""]
    out += [f"{chosen}; default: {default}.", ""]
    for name, member in spec.members.items():
        own = f"kind = {name}" + (", the default" if name == default_kind else "")
        out += [_heading(level + 1, path, [own, *context]), ""]
        inner = [f"{path}.{TAG} = {name}", *context]
        _section(member, path, member_base(spec.field, section, name), level + 1, inner, out, member=True)


def to_markdown(cls: type, *, title: str) -> str:
    """The configuration reference of config class `cls`: per section (dotted path) a table `key | type | default
    | description`; a tagged section gets one table per kind, the default kind marked."""
    out = [
        f"# {title}",
        "",
        "Each key is set by `--<key> V` on the command line or as `<name> = V` in the TOML table of its section "
        "(`--config FILE`); defaults < file < flags.",
        "",
    ]
    _section(cls, "", None, 2, [], out)
    return "\n".join(out).rstrip() + "\n"
