"""Walking a nested config dataclass: every leaf field, its dotted key, type, default and help text."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class Leaf:
    """One settable config value: `key` is dotted (`optim.lr`), `kind` its parsed type."""

    key: str
    kind: Any
    default: Any
    help: str


def is_config(cls: Any) -> bool:
    return dataclasses.is_dataclass(cls) and isinstance(cls, type)


def _unwrap_optional(kind: Any) -> tuple[Any, bool]:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0], True
    return kind, False


def section_default(f: dataclasses.Field, base: Any) -> Any:
    """The instance a nested section starts from: the parent's value, else the field's own default."""
    if base is not None:
        return getattr(base, f.name)
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    if f.default is not dataclasses.MISSING:
        return f.default
    return None


def leaves(cls: type, prefix: str = "", base: Any = None) -> list[Leaf]:
    """All leaf fields of a (nested) config dataclass, depth first, in declaration order.

    A leaf's default is the value it has in `base` (the enclosing default instance) when there is one, so a
    section declared as `field(default_factory=lambda: Section(x=2))` reports `x`'s default as 2.
    """
    hints = typing.get_type_hints(cls)
    out: list[Leaf] = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        key = f"{prefix}{f.name}"
        if is_config(kind):
            out.extend(leaves(kind, key + ".", section_default(f, base)))
            continue
        if base is not None:
            default = getattr(base, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out.append(Leaf(key, kind, default, str(f.metadata.get("help", ""))))
    return out


def convert(value: Any, kind: Any, key: str) -> Any:
    """Converts a TOML value or a command-line string to `kind`; ValueError with got/expected otherwise."""
    kind, optional = _unwrap_optional(kind)
    if optional and (value is None or (isinstance(value, str) and value.lower() in ("none", "null"))):
        return None
    origin = typing.get_origin(kind)
    if origin is Literal:
        choices = typing.get_args(kind)
        for choice in choices:
            if value == choice or (isinstance(value, str) and str(choice) == value):
                return choice
        raise ValueError(f"{key}: expected one of {list(choices)}, got {value!r}")
    if origin in (tuple, list):
        (item,) = typing.get_args(kind)[:1] or (str,)
        parts = value if isinstance(value, list | tuple) else [p for p in str(value).split(",") if p.strip()]
        items = [convert(p.strip() if isinstance(p, str) else p, item, key) for p in parts]
        return tuple(items) if origin is tuple else items
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{key}: expected a bool (true/false), got {value!r}")
    if kind in (int, float, str):
        try:
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise ValueError
            return kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key}: expected {kind.__name__}, got {value!r}") from None
    raise ValueError(f"{key}: unsupported config field type {kind!r}")
