"""Writing a resolved config back as TOML (a run directory keeps the config it ran with)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


def to_dict(cfg: Any) -> dict[str, Any]:
    """Nested plain dict of a config dataclass (tuples become lists); every tagged section holds its `kind`."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _string(s: str) -> str:
    """A TOML basic string, ASCII only: control and non-ASCII characters as \\uXXXX or \\UXXXXXXXX escapes."""
    out = []
    for c in s:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif " " <= c < "\x7f":
            out.append(c)
        elif "\ud800" <= c <= "\udfff":
            raise ValueError(f"to_toml: expected Unicode scalar values, got the lone surrogate {c!r} in {s!r}")
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
    return '"' + "".join(out) + '"'


def toml_value(v: Any) -> str:
    """`v` as a TOML value (None as "none", which `from_dict` reads back as None for an optional key)."""
    if v is None:
        return '"none"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise ValueError(f"to_toml: expected a scalar or a list, got {type(v).__name__}")


def _table(d: dict[str, Any], name: str, out: list[str]) -> None:
    scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in d.items() if isinstance(v, dict)}
    if name and scalars:
        out.append(f"[{name}]")
    for k, v in scalars.items():
        out.append(f"{k} = {toml_value(v)}")
    if scalars:
        out.append("")
    for k, v in tables.items():
        _table(v, f"{name}.{k}" if name else k, out)


def to_toml(cfg: Any) -> str:
    """TOML text that `run_lifecycle.from_dict` reads back to an equal config (None is written as "none")."""
    out: list[str] = []
    _table(to_dict(cfg), "", out)
    return "\n".join(out).rstrip() + "\n"
