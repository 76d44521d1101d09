"""Building a config from dotted keys: dataclass defaults (or a base config), then TOML tables, then flags.

A tagged section's member is chosen by `<section>.kind`, or by a string given for `<section>` itself. Fields left
unset keep the base's values when the chosen kind is the base's (the default instance, or e.g. the saved config
of a resumed run); otherwise they take the chosen member's own defaults (those of the field's declared default
instance when it is of the chosen kind: what a fresh config of that kind gets).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from run_lifecycle.fields import check_declaration, convert, leaves
from run_lifecycle.schema import TAG, FieldSpec, member_base, section_default, specs

C = TypeVar("C")
_UNSET = object()


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables to dotted keys (`{"a": {"b": 1}}` -> `{"a.b": 1}`)."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@dataclass
class _Plan:
    """The members a set of values chooses: kind per tagged-section path, and every key valid under them."""

    kinds: dict[str, str] = field(default_factory=dict)
    members: dict[str, Mapping[str, type]] = field(default_factory=dict)
    valid: set[str] = field(default_factory=set)


def _base_kind(spec: FieldSpec, key: str, section: Any) -> str | None:
    assert spec.members is not None
    if section is None:
        return None
    if type(section) not in spec.members.values():
        names = [m.__qualname__ for m in spec.members.values()]
        raise ValueError(f"{key}: expected the base to hold one of {names}, got {type(section).__qualname__}")
    return str(getattr(section, TAG))


def _chosen_kind(spec: FieldSpec, key: str, flat: Mapping[str, Any], section: Any) -> str | None:
    """The kind `flat` chooses for tagged section `key` (as `key` or `key.kind`), else the base's kind; None when
    neither says (a required section)."""
    assert spec.members is not None
    choices = Literal[tuple(spec.members)]
    given = [(k, convert(flat[k], choices, f"{key}.{TAG}")) for k in (key, f"{key}.{TAG}") if k in flat]
    if len(given) == 2 and given[0][1] != given[1][1]:
        raise ValueError(
            f"{key}.{TAG}: expected one kind, got {given[0][1]!r} (as {key}) and {given[1][1]!r} (as {key}.{TAG})"
        )
    return str(given[0][1]) if given else _base_kind(spec, key, section)


def _plan(cls: type, flat: Mapping[str, Any], prefix: str, base: Any, plan: _Plan, *, strict: bool = True) -> None:
    """Records the kinds `flat` chooses over `base`; a required tagged section left unchosen is a ValueError when
    `strict`, else it is skipped."""
    for spec in specs(cls):
        key = f"{prefix}{spec.name}"
        if spec.members is not None:
            section = section_default(spec.field, base)
            kind = _chosen_kind(spec, key, flat, section)
            if kind is None and not strict:
                continue
            if kind is None:
                raise ValueError(
                    f"{key}.{TAG}: expected one of {list(spec.members)} (the section has no default), got none"
                )
            plan.kinds[key], plan.members[key] = kind, spec.members
            plan.valid.update((key, f"{key}.{TAG}"))
            _plan(spec.members[kind], flat, key + ".", member_base(spec.field, section, kind), plan, strict=strict)
        elif spec.section is not None:
            _plan(spec.section, flat, key + ".", section_default(spec.field, base), plan, strict=strict)
        else:
            plan.valid.add(key)


def _keys_of(member: type) -> set[str]:
    """Every key (relative to the member) that some choice of nested kinds makes valid, shorthands included."""
    out = leaves(member)
    return {leaf.key for leaf in out} | {leaf.section for leaf in out if leaf.chooses}


def _check_keys(cls: type, flat: Mapping[str, Any], plan: _Plan, source: str) -> None:
    """ValueError for keys the chosen kinds lack: naming the kinds that have them, else listing the known keys."""
    wrong_kind: list[str] = []
    unknown: list[str] = []
    for key in sorted(set(flat) - plan.valid):
        holders = [p for p in plan.kinds if key.startswith(p + ".")]
        path = max(holders, key=len, default=None)
        if path is not None:
            rel = key[len(path) + 1 :]
            having = [name for name, member in plan.members[path].items() if rel in _keys_of(member)]
            if having:
                wrong_kind.append(f"{key}: not a key of {path}.{TAG} = {plan.kinds[path]!r}; kinds with it: {having}")
                continue
        unknown.append(key)
    if wrong_kind:
        raise ValueError("; ".join(wrong_kind))
    if unknown:
        out = leaves(cls)
        known = sorted({leaf.key for leaf in out} | {leaf.section for leaf in out if leaf.chooses})
        raise ValueError(f"{source}: unknown key(s) {unknown}; expected keys among {known}")


def _build(cls: type[C], flat: Mapping[str, Any], prefix: str, base: Any, plan: _Plan) -> C:
    """`cls` from `flat` (dotted keys) under the kinds of `plan`; unset fields keep `base`'s values, else the
    declared defaults."""
    kwargs: dict[str, Any] = {}
    for spec in specs(cls):
        key = f"{prefix}{spec.name}"
        if spec.members is not None:
            kind = plan.kinds[key]
            section = member_base(spec.field, section_default(spec.field, base), kind)
            kwargs[spec.name] = _build(spec.members[kind], flat, key + ".", section, plan)
        elif spec.section is not None:
            kwargs[spec.name] = _build(spec.section, flat, key + ".", section_default(spec.field, base), plan)
        elif key in flat:
            kwargs[spec.name] = convert(flat[key], spec.hint, key)
        elif base is not None:
            kwargs[spec.name] = getattr(base, spec.name)
    return cls(**kwargs)


def build_flat(cls: type[C], flat: Mapping[str, Any], *, source: str, base: C | None = None) -> C:
    """A config from dotted keys over `base` (else the declared defaults); unknown keys are a ValueError."""
    if base is not None and not isinstance(base, cls):
        raise TypeError(f"base: expected a {cls.__qualname__}, got {type(base).__qualname__}")
    check_declaration(cls)
    plan = _Plan()
    _plan(cls, flat, "", base, plan)
    _check_keys(cls, flat, plan, source)
    return _build(cls, flat, "", base, plan)


def from_dict(cls: type[C], table: Mapping[str, Any], *, source: str = "config", base: C | None = None) -> C:
    """A config from nested tables (TOML-shaped) over `base` (default: the declared defaults); unknown keys are
    an error naming the known ones, a key of another kind an error naming the kinds that have it."""
    return build_flat(cls, flatten(table), source=source, base=base)


def layer(cls: type, lower: Mapping[str, Any], upper: Mapping[str, Any], base: Any = None) -> dict[str, Any]:
    """`upper`'s dotted keys over `lower`'s, as successive layers: where `upper` chooses a kind for a tagged
    section other than the one `lower` leads to, `lower`'s keys under that section are dropped (the section
    starts from the new member's defaults)."""
    plan = _Plan()
    _plan(cls, lower, "", base, plan, strict=False)
    kept = dict(lower)
    for path, kind in plan.kinds.items():
        given = upper.get(f"{path}.{TAG}", upper.get(path, _UNSET))
        if given is not _UNSET and str(given) != kind:
            kept = {k: v for k, v in kept.items() if k != path and not k.startswith(path + ".")}
    return {**kept, **upper}
