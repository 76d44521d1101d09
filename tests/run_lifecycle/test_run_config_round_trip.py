"""`from_dict(to_toml(cfg)) == cfg` for configs with nested tagged sections; every tagged table holds its kind."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from run_config_examples import (
    GSPO,
    KL,
    VLLM,
    App,
    AppPPO,
    Backend,
    Decoupled,
    MeanBaseline,
    Native,
    Rollout,
    ZeroBaseline,
)
from run_lifecycle import from_dict, to_dict, to_toml

floats = st.floats(allow_nan=False)
counts = st.integers(min_value=-(2**63), max_value=2**63 - 1)
urls = st.none() | st.text().filter(lambda s: s.lower() not in ("none", "null"))  # those two read back as None
baselines = st.just(ZeroBaseline()) | st.builds(MeanBaseline, window=counts)
ppo_fields = {
    "clip": st.floats(min_value=0, max_value=1, exclude_max=True),
    "dual_clip": floats,
    "kl": st.builds(KL, coef=floats, mode=st.sampled_from(["loss", "reward"])),
    "baseline": baselines,
}
algorithms = (
    st.builds(AppPPO, **ppo_fields)
    | st.builds(GSPO, **ppo_fields)
    | st.builds(Decoupled, clip=floats, is_cap=st.floats(min_value=0), baseline=st.builds(MeanBaseline, window=counts))
)
engines = st.builds(Native, slots=counts) | st.builds(VLLM, url=urls, slots=counts)
apps = st.builds(
    App,
    seed=counts,
    algorithm=algorithms,
    rollout=st.builds(Rollout, samples=counts, engine=engines),
    backend=st.builds(Backend, threads=counts),
)


@settings(max_examples=300, deadline=None)
@given(apps)
def test_toml_round_trips_configs_with_nested_tagged_sections(cfg):
    assert from_dict(App, tomllib.loads(to_toml(cfg))) == cfg


def test_every_tagged_table_holds_its_kind():
    cfg = App(algorithm=GSPO(baseline=MeanBaseline()), rollout=Rollout(engine=VLLM()))
    table = tomllib.loads(to_toml(cfg))
    assert table["algorithm"]["kind"] == "gspo" and table["algorithm"]["baseline"]["kind"] == "mean"
    assert table["rollout"]["engine"]["kind"] == "vllm" and table["backend"]["kind"] == "torch"
    assert to_dict(cfg)["algorithm"]["baseline"] == {"kind": "mean", "window": 8}
    assert table["rollout"]["engine"]["url"] == "none"


def test_a_string_with_control_and_astral_characters_round_trips_as_ascii():
    cfg = App(rollout=Rollout(engine=VLLM(url='a\x7fb\x00"\\\n\u00e9\U0001f600')))
    text = to_toml(cfg)
    assert text.isascii() and from_dict(App, tomllib.loads(text)) == cfg


def test_a_lone_surrogate_is_refused_by_the_writer():
    with pytest.raises(ValueError, match="to_toml: expected Unicode scalar values, got the lone surrogate"):
        to_toml(App(rollout=Rollout(engine=VLLM(url="a\ud800"))))
