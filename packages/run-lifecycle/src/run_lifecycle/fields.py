"""Every settable key of a config class: its dotted name, type, default and help text (`leaves`), and converting
a TOML value or a command-line string to a key's type (`convert`)."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from run_lifecycle.schema import TAG, FieldSpec, member_base, section_default, specs, value_default


@dataclass(frozen=True)
class Leaf:
    """One settable config key. `key` is dotted (`optim.lr`), `kind` its type, `default` its default (MISSING:
    required). Under a tagged section, `default` is the default kind's value, or the first kind's in `kinds`
    where the default kind lacks the key.

    `within` is the innermost tagged section the key lies in ("" outside any), `kinds` the kinds of `within` that
    have the key (declaration order) and `defaults` its default under each of them. `chooses` marks a tagged
    section's `<section>.kind`: its `kind` is a Literal of every kind, its default the default member's kind, and
    `<section>` alone takes the same value as shorthand. Where one kind of a nested tagged section occurs under
    several kinds of an enclosing one, the default reported is the one under the enclosing default kind.
    """

    key: str
    kind: Any
    default: Any
    help: str
    within: str = ""
    kinds: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    chooses: bool = False

    @property
    def section(self) -> str:
        """The dotted section the key belongs to ("" at the top level); for `chooses`, the tagged section."""
        return self.key.rpartition(".")[0]


def help_field(text: str, default: object) -> Any:
    """A config field with a default and its help text (`--help`, docs/configuration.md): the one way every section
    documents a field. A mutable default needs `dataclasses.field(default_factory=..., metadata={"help": ...})`."""
    return field(default=default, metadata={"help": text})


def _help_of(spec: FieldSpec) -> str:
    return str(spec.field.metadata.get("help", ""))


def _reported(occurrences: list[tuple[str, Leaf]], default_kind: str | None) -> Leaf:
    return next((leaf for kind, leaf in occurrences if kind == default_kind), occurrences[0][1])


def _merge(path: str, key: str, occurrences: list[tuple[str, Leaf]], default_kind: str | None) -> Leaf:
    """One leaf for `key` from its occurrences `(kind of path, leaf)` in the members of tagged section `path`."""
    withins = list(dict.fromkeys(leaf.within for _, leaf in occurrences))
    if len(withins) > 1:
        got = [w or path for w in withins]
        raise TypeError(f"{key}: expected one enclosing tagged section in every kind of {path}, got {got}")
    reported = _reported(occurrences, default_kind)
    help_text = reported.help or next((leaf.help for _, leaf in occurrences if leaf.help), "")
    if not withins[0]:  # directly in the members (or in their ordinary sections): the kinds are path's
        kind_type = reported.kind
        if reported.chooses:  # a nested tagged section may have different members under different kinds
            choices = [c for _, leaf in occurrences for c in typing.get_args(leaf.kind)]
            kind_type = Literal[tuple(dict.fromkeys(choices))]
        return dataclasses.replace(
            reported,
            kind=kind_type,
            help=help_text,
            within=path,
            kinds=tuple(k for k, _ in occurrences),
            defaults={k: leaf.default for k, leaf in occurrences},
        )
    kinds = tuple(dict.fromkeys(k for _, leaf in occurrences for k in leaf.kinds))
    preferred = sorted(occurrences, key=lambda occ: occ[0] != default_kind)  # stable: the default kind first
    defaults: dict[str, Any] = {}
    for _, leaf in preferred:
        for k, v in leaf.defaults.items():
            defaults.setdefault(k, v)
    return dataclasses.replace(reported, help=help_text, kinds=kinds, defaults={k: defaults[k] for k in kinds})


def _tagged(spec: FieldSpec, key: str, section: Any) -> list[Leaf]:
    assert spec.members is not None
    default_kind = None if section is None else getattr(section, TAG)
    by_key: dict[str, list[tuple[str, Leaf]]] = {}
    for name, member in spec.members.items():
        for leaf in _walk(member, key + ".", member_base(spec.field, section, name)):
            if leaf.key != f"{key}.{TAG}":
                by_key.setdefault(leaf.key, []).append((name, leaf))
    choose = Leaf(
        f"{key}.{TAG}",
        Literal[tuple(spec.members)],
        dataclasses.MISSING if default_kind is None else default_kind,
        _help_of(spec),
        chooses=True,
    )
    return [choose] + [_merge(key, k, occurrences, default_kind) for k, occurrences in by_key.items()]


def _walk(cls: type, prefix: str, base: Any) -> list[Leaf]:
    out: list[Leaf] = []
    for spec in specs(cls):
        key = f"{prefix}{spec.name}"
        if spec.members is not None:
            out.extend(_tagged(spec, key, section_default(spec.field, base)))
        elif spec.section is not None:
            out.extend(_walk(spec.section, key + ".", section_default(spec.field, base)))
        else:
            out.append(Leaf(key, spec.hint, value_default(spec.field, base), _help_of(spec)))
    return out


def _check_shapes(out: list[Leaf]) -> None:
    """A path that is a tagged section in one kind must be one in every kind that has it."""
    tagged = [leaf.section for leaf in out if leaf.chooses]
    keys = {leaf.key for leaf in out}
    for path in tagged:
        if path in keys:
            raise TypeError(f"{path}: expected a tagged section or a value in every kind, got both")
        for leaf in out:
            inside = leaf.within == path or leaf.within.startswith(path + ".")
            if leaf.key.startswith(path + ".") and leaf.key != f"{path}.{TAG}" and not inside:
                raise TypeError(
                    f"{leaf.key}: expected {path} to be a tagged section in every kind, got an ordinary section"
                )


@functools.cache
def check_declaration(cls: type) -> None:
    """TypeError for a malformed declaration anywhere in `cls` (checked once per class)."""
    leaves(cls)


def leaves(cls: type, prefix: str = "", base: Any = None) -> list[Leaf]:
    """Every settable key of a (nested) config dataclass, depth first, in declaration order; a tagged section's
    `<section>.kind` comes first, then each key of its members once, in order of first appearance.

    A leaf's default is the value it has in `base` (the enclosing default instance) when there is one, so a
    section declared as `field(default_factory=lambda: Section(x=2))` reports `x`'s default as 2; a tagged
    section's other kinds report the defaults a fresh config of that kind gets.
    """
    out = _walk(cls, prefix, base)
    _check_shapes(out)
    return out


def unwrap_optional(kind: Any) -> tuple[Any, bool]:
    """`(T, True)` for `T | None`, else `(kind, False)`."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0], True
    return kind, False


def convert(value: Any, kind: Any, key: str) -> Any:
    """Converts a TOML value or a command-line string to `kind`; ValueError with got/expected otherwise."""
    kind, optional = unwrap_optional(kind)
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
