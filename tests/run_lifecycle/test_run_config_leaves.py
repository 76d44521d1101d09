"""`leaves` of a config with tagged sections: `section.kind` first, each member key once, saying which kinds
have it and its default under each."""

from __future__ import annotations

import dataclasses
from typing import Literal

from run_config_examples import App, Decoupled, MeanBaseline, Required
from run_lifecycle import Leaf, from_dict, leaves


def _by_key() -> dict[str, Leaf]:
    return {leaf.key: leaf for leaf in leaves(App)}


def test_tagged_keys_come_once_each_after_the_sections_kind():
    assert [leaf.key for leaf in leaves(App)] == [
        "seed",
        "algorithm.kind",
        "algorithm.clip",
        "algorithm.dual_clip",
        "algorithm.kl.coef",
        "algorithm.kl.mode",
        "algorithm.baseline.kind",
        "algorithm.baseline.window",
        "algorithm.is_cap",
        "rollout.samples",
        "rollout.engine.kind",
        "rollout.engine.slots",
        "rollout.engine.url",
        "backend.kind",
        "backend.threads",
    ]


def test_a_sections_kind_is_a_literal_of_every_kind_defaulting_to_the_default_member():
    kind = _by_key()["algorithm.kind"]
    assert kind.kind == Literal["ppo", "gspo", "decoupled"] and kind.default == "ppo" and kind.chooses
    assert kind.help == "the policy loss" and kind.section == "algorithm" and kind.within == ""
    backend = _by_key()["backend.kind"]  # one member: still a tagged section
    assert backend.kind == Literal["torch"] and backend.chooses


def test_each_key_says_its_kinds_and_its_default_in_each():
    by_key = _by_key()
    clip = by_key["algorithm.clip"]
    assert clip.within == "algorithm" and clip.kinds == ("ppo", "gspo", "decoupled")
    assert clip.defaults == {"ppo": 0.1, "gspo": 3e-4, "decoupled": 0.2} and clip.default == 0.1
    assert clip.help == "ratio clip"  # the subclass redeclares clip without help: another kind's help is kept
    assert by_key["algorithm.is_cap"].kinds == ("decoupled",) and by_key["algorithm.is_cap"].default == 0.0
    coef = by_key["algorithm.kl.coef"]
    assert coef.kinds == ("ppo", "gspo") and coef.section == "algorithm.kl" and coef.within == "algorithm"
    assert by_key["rollout.engine.url"].within == "rollout.engine" and by_key["rollout.engine.url"].kinds == ("vllm",)
    assert by_key["seed"] == Leaf("seed", int, 0, "")  # outside tagged sections: the fields as before


def test_nested_tagged_sections_merge_their_kinds_across_the_outer_kinds():
    by_key = _by_key()
    baseline = by_key["algorithm.baseline.kind"]
    assert baseline.chooses and baseline.kind == Literal["zero", "mean"] and baseline.within == "algorithm"
    assert baseline.defaults == {"ppo": "zero", "gspo": "zero", "decoupled": "mean"}
    window = by_key["algorithm.baseline.window"]
    assert window.within == "algorithm.baseline" and window.kinds == ("mean",)
    assert window.defaults == {"mean": 8}  # ppo (the default kind) declares mean's class default; decoupled's is 4


def test_a_nested_keys_default_is_the_one_under_the_enclosing_default_kind():
    base = App(algorithm=Decoupled(baseline=MeanBaseline(window=5)))  # decoupled, not ppo (8), is the default
    window = {leaf.key: leaf for leaf in leaves(App, base=base)}["algorithm.baseline.window"]
    assert window.default == 5 and window.defaults == {"mean": 5}


def test_leaves_of_a_base_report_its_values_and_its_kind():
    saved = from_dict(App, {"algorithm": {"kind": "decoupled", "clip": 0.3}})
    by_key = {leaf.key: leaf for leaf in leaves(App, base=saved)}
    assert by_key["algorithm.kind"].default == "decoupled" and by_key["algorithm.clip"].default == 0.3
    assert by_key["algorithm.clip"].defaults == {"ppo": 0.1, "gspo": 3e-4, "decoupled": 0.3}


def test_a_required_tagged_sections_kind_has_no_default():
    assert {leaf.key: leaf.default for leaf in leaves(Required)}["engine.kind"] is dataclasses.MISSING
