"""Tagged sections: `section.kind` (or `section` alone) chooses the member; unset fields come from the base when
the kind is the base's, else from the chosen kind's defaults; every mistake is a ValueError naming the key."""

from __future__ import annotations

import pytest
from run_config_examples import (
    GSPO,
    VLLM,
    App,
    AppPPO,
    Backend,
    Decoupled,
    MeanBaseline,
    Native,
    Required,
    Tuned,
    ZeroBaseline,
)
from run_lifecycle import from_dict, parse_config, to_toml

KINDS = r"\['ppo', 'gspo', 'decoupled'\]"


def test_defaults_choose_the_default_member():
    cfg = from_dict(App, {})
    assert cfg.algorithm == AppPPO() and cfg.rollout.engine == Native() and cfg.backend == Backend()
    assert type(cfg.algorithm) is AppPPO and cfg.algorithm.kind == "ppo"  # a subclass inherits its parent's kind


def test_kind_chooses_the_member_and_keys_set_its_fields():
    cfg = from_dict(App, {"algorithm": {"kind": "decoupled", "is_cap": 2.0}, "rollout": {"engine": {"kind": "vllm"}}})
    assert cfg.algorithm == Decoupled(is_cap=2.0) and cfg.rollout.engine == VLLM()


def test_a_string_for_the_section_is_its_kind_in_toml_and_on_the_command_line():
    assert from_dict(App, {"algorithm": "gspo"}).algorithm == GSPO()
    cfg = parse_config(App, ["--algorithm", "gspo", "--algorithm.clip", "0.001", "--rollout.engine", "vllm"])
    assert cfg.algorithm == GSPO(clip=0.001) and cfg.rollout.engine == VLLM()
    assert parse_config(App, ["--algorithm.kind", "decoupled"]).algorithm == Decoupled()


def test_both_spellings_of_one_kind_are_accepted():
    assert parse_config(App, ["--algorithm", "gspo", "--algorithm.kind", "gspo"]).algorithm == GSPO()


def test_nested_tagged_sections_choose_independently():
    cfg = from_dict(App, {"algorithm": {"kind": "gspo", "baseline": {"kind": "mean", "window": 3}}})
    assert cfg.algorithm == GSPO(baseline=MeanBaseline(window=3))
    assert parse_config(App, ["--algorithm.baseline", "mean"]).algorithm.baseline == MeanBaseline()


def test_other_kinds_take_their_own_defaults_not_the_default_members():
    # clip is a key of every kind; gspo's own default is 3e-4, the default member's (ppo) is 0.1
    assert from_dict(App, {"algorithm": {"kind": "gspo"}}).algorithm.clip == 3e-4
    # a one-member section keeps the member's declared default instance (window 4, not the class's 8)
    assert from_dict(App, {"algorithm": "decoupled"}).algorithm.baseline == MeanBaseline(window=4)


def test_the_declared_default_instance_is_kept_for_its_kind():
    assert from_dict(Tuned, {}).algorithm == AppPPO(clip=0.15)
    assert from_dict(Tuned, {"algorithm": {"dual_clip": 2.0}}).algorithm == AppPPO(clip=0.15, dual_clip=2.0)
    assert from_dict(Tuned, {"algorithm": "gspo"}).algorithm == GSPO()


def test_a_base_of_the_chosen_kind_keeps_its_values():
    saved = from_dict(App, {"seed": 4, "algorithm": {"kind": "decoupled", "is_cap": 2.0, "clip": 0.3}})
    cfg = from_dict(App, {"algorithm": {"clip": 0.25}}, base=saved)
    assert cfg.seed == 4 and cfg.algorithm == Decoupled(clip=0.25, is_cap=2.0)
    assert from_dict(App, {"algorithm": {"kind": "decoupled"}}, base=saved).algorithm == saved.algorithm


def test_a_resumed_base_of_another_kind_gives_the_new_kinds_defaults():
    saved = from_dict(App, {"seed": 4, "algorithm": {"kind": "decoupled", "is_cap": 2.0, "clip": 0.3}})
    cfg = from_dict(App, {"algorithm": "gspo"}, base=saved)
    assert cfg.seed == 4 and cfg.algorithm == GSPO()  # clip: gspo's 3e-4, not the base's 0.3
    tuned_saved = Tuned(algorithm=Decoupled(is_cap=2.0))
    assert from_dict(Tuned, {"algorithm": "ppo"}, base=tuned_saved).algorithm == AppPPO(clip=0.15)  # as when fresh


def test_a_saved_config_file_then_a_flag_of_another_kind_drops_the_files_section(tmp_path):
    saved = from_dict(App, {"seed": 4, "algorithm": {"kind": "decoupled", "is_cap": 2.0, "clip": 0.3}})
    path = tmp_path / "config.toml"
    path.write_text(to_toml(saved))
    cfg = parse_config(App, ["--config", str(path), "--algorithm", "gspo"])
    assert cfg.seed == 4 and cfg.algorithm == GSPO()
    same_kind = parse_config(App, ["--config", str(path), "--algorithm.kind", "decoupled", "--algorithm.is_cap", "3"])
    assert same_kind.algorithm == Decoupled(clip=0.3, is_cap=3.0)


def test_a_flag_of_another_kind_drops_file_keys_given_for_the_default_kind(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[algorithm]\ndual_clip = 2.0\n[rollout.engine]\nslots = 8\n")
    cfg = parse_config(App, ["--config", str(path), "--algorithm", "decoupled"])
    assert cfg.algorithm == Decoupled() and cfg.rollout.engine == Native(slots=8)


def test_a_required_tagged_section_is_chosen_by_a_flag_or_a_file(tmp_path):
    assert parse_config(Required, ["--engine", "vllm", "--engine.slots", "2"]).engine == VLLM(slots=2)
    path = tmp_path / "c.toml"
    path.write_text('engine = "native"\n')
    assert parse_config(Required, ["--config", str(path), "--seed", "1"]) == Required(engine=Native(), seed=1)


def test_member_validation_runs_for_frozen_and_plain_members():
    with pytest.raises(ValueError, match=r"algorithm.clip: expected in \[0, 1\), got 1.5"):
        from_dict(App, {"algorithm": {"clip": 1.5}})  # frozen PPO subclass
    with pytest.raises(ValueError, match=r"algorithm.is_cap: expected >= 0, got -1\.0"):
        from_dict(App, {"algorithm": {"kind": "decoupled", "is_cap": -1.0}})  # plain dataclass


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"algorithm": {"kind": "foo"}}, rf"^algorithm.kind: expected one of {KINDS}, got 'foo'$"),
        ({"algorithm": "foo"}, rf"^algorithm.kind: expected one of {KINDS}, got 'foo'$"),
        ({"algorithm": 3}, rf"^algorithm.kind: expected one of {KINDS}, got 3$"),
        (
            {"algorithm": {"is_cap": 1.0}},
            r"^algorithm.is_cap: not a key of algorithm.kind = 'ppo'; kinds with it: \['decoupled'\]$",
        ),
        (
            {"algorithm": {"kind": "decoupled", "kl": {"coef": 1.0}}},
            r"^algorithm.kl.coef: not a key of algorithm.kind = 'decoupled'; kinds with it: \['ppo', 'gspo'\]$",
        ),
        (
            {"algorithm": {"kind": "gspo", "baseline": {"window": 3}}},
            r"^algorithm.baseline.window: not a key of algorithm.baseline.kind = 'zero'; kinds with it: \['mean'\]$",
        ),
        (
            {"rollout": {"engine": {"url": "http://h:1"}}},
            r"^rollout.engine.url: not a key of rollout.engine.kind = 'native'; kinds with it: \['vllm'\]$",
        ),
        ({"algorithm": {"nope": 1.0}}, r"^config: unknown key\(s\) \['algorithm.nope'\]; expected keys among \["),
        ({"rollout": {"engine": {"kind": "vllm", "slots": "x"}}}, r"^rollout.engine.slots: expected int, got 'x'$"),
        ({"backend": {"kind": "jax"}}, r"^backend.kind: expected one of \['torch'\], got 'jax'$"),
    ],
)
def test_tagged_section_mistakes_are_rejected_naming_the_key(table, match):
    with pytest.raises(ValueError, match=match):
        from_dict(App, table)


def test_the_unknown_key_error_lists_tagged_keys_and_shorthands():
    with pytest.raises(ValueError, match=r"expected keys among \[.*'algorithm', .*'algorithm.is_cap', .*'backend'"):
        from_dict(App, {"nope": 1})


def test_two_different_kinds_for_one_section_are_an_error():
    with pytest.raises(ValueError, match=r"algorithm.kind: expected one kind, got 'gspo' \(as algorithm\) and 'ppo'"):
        parse_config(App, ["--algorithm", "gspo", "--algorithm.kind", "ppo"])


def test_a_required_tagged_section_without_a_kind_is_an_error():
    with pytest.raises(ValueError, match=r"engine.kind: expected one of \['native', 'vllm'\] \(the section has no"):
        from_dict(Required, {"seed": 1})


def test_a_base_holding_a_non_member_is_an_error():
    with pytest.raises(ValueError, match=r"algorithm: expected the base to hold one of .*, got ZeroBaseline"):
        from_dict(App, {}, base=App(algorithm=ZeroBaseline()))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="base: expected a App, got Tuned"):
        from_dict(App, {}, base=Tuned())  # type: ignore[arg-type]
