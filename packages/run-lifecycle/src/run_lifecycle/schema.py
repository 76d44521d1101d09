"""The validated declaration of a config class: each field is a value, an ordinary section or a tagged section.

A tagged section is a field annotated with a union of config dataclasses (`PPOConfig | GSPOConfig`), or with one
config dataclass, whose every member declares `kind: Literal["<name>"] = "<name>"` with a distinct name; the
member is chosen by `<section>.kind`. A declaration is checked once per class (the result is cached) and a
malformed one is a TypeError naming `Class.field`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

TAG = "kind"  # the field of a tagged section's member that names it


def is_config(cls: Any) -> bool:
    return dataclasses.is_dataclass(cls) and isinstance(cls, type)


@dataclass(frozen=True)
class FieldSpec:
    """One field of a config class. `section` is set for an ordinary nested section, `members` (kind -> class, in
    the union's declaration order) for a tagged section; neither for a value."""

    name: str
    hint: Any
    field: dataclasses.Field
    section: type | None = None
    members: Mapping[str, type] | None = None


def tag_of(cls: type) -> str | None:
    """The kind a config class declares (`kind: Literal["ppo"] = "ppo"`, possibly inherited); None without one."""
    if TAG not in {f.name for f in dataclasses.fields(cls)}:
        return None
    hint = _hints(cls)[TAG]
    args = typing.get_args(hint)
    if typing.get_origin(hint) is Literal and len(args) == 1 and isinstance(args[0], str):
        return args[0]
    return None


def _member_tag(owner: str, member: type) -> str:
    name = tag_of(member)
    declared = {f.name: f for f in dataclasses.fields(member)}.get(TAG)
    if name is None:
        got = "no such field" if declared is None else f"kind: {_hints(member)[TAG]!r}"
        raise TypeError(
            f"{owner}: union member {member.__qualname__} expected a field `kind: Literal['<name>'] = '<name>'`, "
            f"got {got}"
        )
    assert declared is not None
    if declared.default != name:
        raise TypeError(
            f"{owner}: union member {member.__qualname__} expected kind's default {name!r}, got {declared.default!r}"
        )
    return name


def _members(owner: str, hint: Any) -> dict[str, type] | None:
    """The members of a tagged section by kind; None when `hint` is no tagged section."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if not any(is_config(a) for a in args):
            return None
        others = [a for a in args if not is_config(a)]
        if others:
            raise TypeError(f"{owner}: expected a union of config dataclasses only, got {hint!r} (with {others!r})")
    elif is_config(hint) and tag_of(hint) is not None:
        args = (hint,)
    else:
        return None
    members: dict[str, type] = {}
    for member in args:
        name = _member_tag(owner, member)
        if name in members:
            raise TypeError(
                f"{owner}: expected distinct kinds, got {name!r} for both {members[name].__qualname__} and "
                f"{member.__qualname__}"
            )
        members[name] = member
    return members


def _check_default(owner: str, f: dataclasses.Field, members: Mapping[str, type]) -> None:
    if f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    elif f.default is not dataclasses.MISSING:
        default = f.default
    else:
        return  # a required tagged section: its kind must be given
    if type(default) not in members.values():
        raise TypeError(
            f"{owner}: expected a default of one of {[m.__qualname__ for m in members.values()]}, got "
            f"{type(default).__qualname__}"
        )


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def specs(cls: type) -> tuple[FieldSpec, ...]:
    """The fields of config class `cls`, in declaration order, each classified (TypeError for a bad declaration)."""
    hints = _hints(cls)
    out: list[FieldSpec] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        owner = f"{cls.__qualname__}.{f.name}"
        members = _members(owner, hint)
        if members is not None:
            _check_default(owner, f, members)
            out.append(FieldSpec(f.name, hint, f, members=types.MappingProxyType(members)))
        elif is_config(hint):
            out.append(FieldSpec(f.name, hint, f, section=hint))
        else:
            out.append(FieldSpec(f.name, hint, f))
    return tuple(out)


def section_default(f: dataclasses.Field, base: Any) -> Any:
    """The instance a nested section starts from: the parent's value, else the field's own default (None when the
    section is required)."""
    if base is not None:
        return getattr(base, f.name)
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    if f.default is not dataclasses.MISSING:
        return f.default
    return None


def value_default(f: dataclasses.Field, base: Any) -> Any:
    """A value field's default: its value in `base` when there is one, else the declared default (or MISSING)."""
    if base is not None:
        return getattr(base, f.name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def member_base(f: dataclasses.Field, section: Any, kind: str) -> Any:
    """The instance the chosen member `kind` of tagged section `f` starts from: `section` (the base's or the
    default instance) when it is of that kind, else the field's declared default when that is, else None (the
    member's class defaults). So a kind other than the base's gets what a fresh config of that kind gets."""
    if section is not None and getattr(section, TAG) == kind:
        return section
    declared = section_default(f, None)
    return declared if declared is not None and getattr(declared, TAG) == kind else None
