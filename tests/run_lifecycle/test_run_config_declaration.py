"""A malformed tagged section is a TypeError naming the field, raised before any value is read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest
from run_config_examples import GSPO, PPO, VLLM, AppPPO, Native, Rollout
from run_lifecycle import from_dict, leaves


@dataclass(frozen=True)
class NoKind:
    slots: int = 1


@dataclass(frozen=True)
class StrKind:
    kind: str = "native"


@dataclass(frozen=True)
class NativeToo:
    kind: Literal["native"] = "native"


@dataclass(frozen=True)
class WrongDefault:
    kind: Literal["odd"] = "even"  # type: ignore[assignment]


@dataclass(frozen=True)
class MissingKind:
    engine: Native | NoKind = field(default_factory=Native)


@dataclass(frozen=True)
class NotLiteral:
    engine: Native | StrKind = field(default_factory=Native)


@dataclass(frozen=True)
class SameKind:
    engine: Native | NativeToo = field(default_factory=Native)


@dataclass(frozen=True)
class ParentAndChild:
    algorithm: PPO | AppPPO = field(default_factory=PPO)


@dataclass(frozen=True)
class ForeignDefault:
    engine: Native | VLLM = field(default_factory=GSPO)  # type: ignore[assignment]


@dataclass(frozen=True)
class Mixed:
    engine: Native | int = 0


@dataclass(frozen=True)
class BadDefaultKind:
    engine: Native | WrongDefault = field(default_factory=Native)


@dataclass(frozen=True)
class ValueHere:
    kind: Literal["a"] = "a"
    engine: float = 1.0


@dataclass(frozen=True)
class TaggedHere:
    kind: Literal["b"] = "b"
    engine: Native | VLLM = field(default_factory=Native)


@dataclass(frozen=True)
class OrdinaryHere:
    kind: Literal["c"] = "c"
    engine: Rollout = field(default_factory=Rollout)


@dataclass(frozen=True)
class Slots:
    slots: int = 1


@dataclass(frozen=True)
class SlotsHere:
    kind: Literal["d"] = "d"
    engine: Slots = field(default_factory=Slots)


@dataclass(frozen=True)
class SlotsOrTagged:
    part: SlotsHere | TaggedHere = field(default_factory=SlotsHere)


@dataclass(frozen=True)
class ValueOrTagged:
    part: ValueHere | TaggedHere = field(default_factory=ValueHere)


@dataclass(frozen=True)
class OrdinaryOrTagged:
    part: OrdinaryHere | TaggedHere = field(default_factory=OrdinaryHere)


@pytest.mark.parametrize(
    ("cls", "match"),
    [
        (
            MissingKind,
            r"MissingKind.engine: union member NoKind expected a field `kind: Literal\['<name>'\] = "
            r"'<name>'`, got no such field",
        ),
        (NotLiteral, r"NotLiteral.engine: union member StrKind expected a field .*, got kind: <class 'str'>"),
        (SameKind, "SameKind.engine: expected distinct kinds, got 'native' for both Native and NativeToo"),
        (ParentAndChild, "ParentAndChild.algorithm: expected distinct kinds, got 'ppo' for both PPO and AppPPO"),
        (ForeignDefault, r"ForeignDefault.engine: expected a default of one of \['Native', 'VLLM'\], got GSPO"),
        (Mixed, r"Mixed.engine: expected a union of config dataclasses only, got .* \(with \[<class 'int'>\]\)"),
        (BadDefaultKind, "BadDefaultKind.engine: union member WrongDefault expected kind's default 'odd', got 'even'"),
        (ValueOrTagged, "part.engine: expected a tagged section or a value in every kind, got both"),
        (
            OrdinaryOrTagged,
            "part.engine.samples: expected part.engine to be a tagged section in every kind, got an ordinary section",
        ),
        (
            SlotsOrTagged,
            r"part.engine.slots: expected one enclosing tagged section in every kind of part, got "
            r"\['part', 'part.engine'\]",
        ),
    ],
)
def test_a_malformed_declaration_is_a_type_error_naming_the_field(cls, match):
    with pytest.raises(TypeError, match=match):
        leaves(cls)
    with pytest.raises(TypeError, match=match):
        from_dict(cls, {})
