"""Writing a resolved config back as TOML (a run directory keeps the config it ran with)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


def to_dict(cfg: Any) -> dict[str, Any]:
    """Nested plain dict of a config dataclass (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise ValueError(f"to_toml: expected a scalar or a list, got {type(v).__name__}")


def _table(d: dict[str, Any], name: str, out: list[str]) -> None:
    scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in d.items() if isinstance(v, dict)}
    if name and scalars:
        out.append(f"[{name}]")
    for k, v in scalars.items():
        out.append(f'{k} = "none"' if v is None else f"{k} = {_value(v)}")
    if scalars:
        out.append("")
    for k, v in tables.items():
        _table(v, f"{name}.{k}" if name else k, out)


def to_toml(cfg: Any) -> str:
    """TOML text that `run_config.from_dict` reads back to an equal config (None is written as "none")."""
    out: list[str] = []
    _table(to_dict(cfg), "", out)
    return "\n".join(out).rstrip() + "\n"
