"""`add_arguments`: one option per distinct key plus `--section KIND` per tagged section, grouped by section, help
naming the kinds and per-kind defaults; options are never abbreviated."""

from __future__ import annotations

import argparse

import pytest
from run_config_examples import App, OneKey
from run_lifecycle import add_arguments, parse_config


def _wide(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, max_help_position=60, width=250)  # one line per option


def _help(cls: type) -> str:
    parser = argparse.ArgumentParser(prog="app", formatter_class=_wide)
    add_arguments(parser, cls)
    return parser.format_help()


def _group(text: str, title: str) -> list[str]:
    """The option lines of the argument group `title` in a help text."""
    lines = text.splitlines()
    start = lines.index(f"{title}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return [line.strip() for line in lines[start:end]]


def test_every_key_and_tagged_section_has_exactly_one_option():
    parser = argparse.ArgumentParser()
    add_arguments(parser, App)
    options = [s for action in parser._actions for s in action.option_strings if s.startswith("--")]
    assert options == [
        "--help",
        "--config",
        "--seed",
        "--algorithm",
        "--algorithm.kind",
        "--algorithm.clip",
        "--algorithm.dual_clip",
        "--algorithm.kl.coef",
        "--algorithm.kl.mode",
        "--algorithm.baseline",
        "--algorithm.baseline.kind",
        "--algorithm.baseline.window",
        "--algorithm.is_cap",
        "--rollout.samples",
        "--rollout.engine",
        "--rollout.engine.kind",
        "--rollout.engine.slots",
        "--rollout.engine.url",
        "--backend",
        "--backend.kind",
        "--backend.threads",
    ]


def test_options_are_grouped_by_section_titled_with_its_kinds():
    text = _help(App)
    algorithm = _group(text, "algorithm (kind: ppo | gspo | decoupled)")
    assert [line.split()[0] for line in algorithm] == [
        "--algorithm",
        "--algorithm.kind",
        "--algorithm.clip",
        "--algorithm.dual_clip",
        "--algorithm.is_cap",
    ]
    assert [line.split()[0] for line in _group(text, "algorithm.kl")] == ["--algorithm.kl.coef", "--algorithm.kl.mode"]
    engine = _group(text, "rollout.engine (kind: native | vllm)")
    assert [line.split()[0] for line in engine][:2] == ["--rollout.engine", "--rollout.engine.kind"]
    assert _group(text, "backend (kind: torch)")[0].startswith("--backend KIND")
    assert text.index("algorithm (kind:") < text.index("algorithm.kl:") < text.index("rollout:")


def test_help_names_kinds_and_per_kind_defaults():
    lines = {line.split()[0]: line for line in _group(_help(App), "algorithm (kind: ppo | gspo | decoupled)")}
    assert lines["--algorithm"].endswith("short for --algorithm.kind")
    assert lines["--algorithm.kind"].endswith("the policy loss, one of: ppo | gspo | decoupled (default: 'ppo')")
    assert lines["--algorithm.clip"].endswith("ratio clip (default: ppo=0.1, gspo=0.0003, decoupled=0.2)")
    assert lines["--algorithm.dual_clip"].endswith("dual-clip cap (algorithm.kind: ppo, gspo; default: 3.0)")
    assert lines["--algorithm.is_cap"].endswith("(0: off) (algorithm.kind: decoupled; default: 0.0)")
    text = _help(App)
    assert "(algorithm.kind: ppo, gspo; default: 0.0)" in _group(text, "algorithm.kl")[0]
    baseline = {line.split()[0]: line for line in _group(text, "algorithm.baseline (kind: zero | mean)")}
    assert baseline["--algorithm.baseline.kind"].endswith("(default: ppo='zero', gspo='zero', decoupled='mean')")
    assert baseline["--algorithm.baseline.window"].endswith("(algorithm.baseline.kind: mean; default: 8)")
    engine = {line.split()[0]: line for line in _group(text, "rollout.engine (kind: native | vllm)")}
    assert engine["--rollout.engine.slots"].endswith("KV-cache slots (default: native=256, vllm=64)")
    assert engine["--rollout.engine.url"].endswith("(rollout.engine.kind: vllm; default: None)")


def test_options_are_never_abbreviated():
    for argv in (["--rollout.engine.sl", "3"], ["--backend.thr", "2"], ["--algorithm.is", "2"]):
        with pytest.raises(SystemExit):
            parse_config(App, argv)
    with pytest.raises(SystemExit):
        parse_config(OneKey, ["--task", "math"])  # not --task.name
    parser = argparse.ArgumentParser()  # a caller's parser, prefix matching on by default
    add_arguments(parser, OneKey)
    with pytest.raises(SystemExit):
        parser.parse_args(["--task.na", "math"])
    assert parser.parse_args(["--task.name", "math"]).__dict__["task.name"] == "math"


def test_help_with_a_percent_sign_renders():
    assert "share of prompts (%) (default: 0.5)" in _help(OneKey)
