"""Configs resolve defaults < TOML < flags, reject unknown keys and bad values, and round-trip through TOML."""

from dataclasses import dataclass, field
from typing import Literal

import pytest
from run_lifecycle import from_dict, leaves, parse_config, to_toml


@dataclass(frozen=True)
class Optim:
    lr: float = field(default=1e-4, metadata={"help": "learning rate"})
    betas: tuple[float, ...] = (0.9, 0.999)


@dataclass(frozen=True)
class Rollout:
    samples_per_prompt: int = 8
    partial_rollout: bool = True
    routing: Literal["per_position", "latest"] = "per_position"
    engine_url: str | None = None


@dataclass(frozen=True)
class App:
    seed: int = 0
    optim: Optim = field(default_factory=Optim)
    rollout: Rollout = field(default_factory=Rollout)

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f"seed: expected >= 0, got {self.seed}")


def test_defaults_file_then_flags(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('seed = 3\n[optim]\nlr = 0.5\n[rollout]\nrouting = "latest"\n')
    cfg = parse_config(App, ["--config", str(path), "--optim.lr", "0.25", "--rollout.partial_rollout", "false"])
    assert cfg.seed == 3 and cfg.optim.lr == 0.25 and cfg.optim.betas == (0.9, 0.999)
    assert cfg.rollout.routing == "latest" and cfg.rollout.partial_rollout is False


def test_every_leaf_has_a_dotted_key():
    assert [leaf.key for leaf in leaves(App)] == [
        "seed",
        "optim.lr",
        "optim.betas",
        "rollout.samples_per_prompt",
        "rollout.partial_rollout",
        "rollout.routing",
        "rollout.engine_url",
    ]


def test_list_and_optional_values_parse_from_flags():
    cfg = parse_config(App, ["--optim.betas", "0.8,0.95", "--rollout.engine_url", "http://127.0.0.1:1"])
    assert cfg.optim.betas == (0.8, 0.95) and cfg.rollout.engine_url == "http://127.0.0.1:1"
    assert parse_config(App, ["--rollout.engine_url", "none"]).rollout.engine_url is None


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"optim": {"lrr": 1.0}}, r"unknown key\(s\) \['optim.lrr'\]; expected keys among"),
        ({"rollout": {"routing": "all"}}, r"rollout.routing: expected one of \['per_position', 'latest'\], got 'all'"),
        ({"seed": "x"}, "seed: expected int, got 'x'"),
        ({"seed": 1.5}, "seed: expected int, got 1.5"),
        ({"rollout": {"partial_rollout": "maybe"}}, r"expected a bool \(true/false\), got 'maybe'"),
        ({"seed": -1}, "seed: expected >= 0, got -1"),
    ],
)
def test_bad_values_are_rejected_with_got_and_expected(table, match):
    with pytest.raises(ValueError, match=match):
        from_dict(App, table)


def test_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="expected an existing TOML file"):
        parse_config(App, ["--config", str(tmp_path / "nope.toml")])


def test_toml_round_trip():
    import tomllib

    cfg = from_dict(App, {"seed": 5, "optim": {"betas": [0.5]}, "rollout": {"routing": "latest"}})
    assert from_dict(App, tomllib.loads(to_toml(cfg))) == cfg


def test_help_lists_keys_and_defaults(capsys):
    with pytest.raises(SystemExit):
        parse_config(App, ["--help"])
    out = capsys.readouterr().out
    assert "--optim.lr V" in out and "learning rate (default: 0.0001)" in out


@dataclass(frozen=True)
class Tuned:
    optim: Optim = field(default_factory=lambda: Optim(lr=0.5))
    rollout: Rollout = field(default_factory=lambda: Rollout(samples_per_prompt=2, routing="latest"))


def test_a_sections_own_default_is_kept_and_overridable():
    cfg = parse_config(Tuned, ["--rollout.partial_rollout", "false"])
    assert cfg.optim.lr == 0.5 and cfg.rollout.samples_per_prompt == 2 and cfg.rollout.routing == "latest"
    assert cfg.rollout.partial_rollout is False
    assert {leaf.key: leaf.default for leaf in leaves(Tuned)}["optim.lr"] == 0.5
    assert from_dict(Tuned, {"optim": {"lr": 0.1}}).optim == Optim(lr=0.1)
