"""The warm-up's model preset is checked when its config is constructed, against the presets moe_models defines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from moe_models.config import PRESETS, MoEConfig
from rl_tasks import model_presets
from rl_tasks.model_presets import model_preset_names
from rl_tasks.warmup import WarmupConfig


def test_preset_names_are_those_moe_models_defines() -> None:
    assert model_preset_names() == tuple(sorted(PRESETS)) == ("small", "tiny")
    for name in model_preset_names():
        assert MoEConfig.preset(name, vocab_size=16).hidden_size == PRESETS[name]["hidden_size"]


def test_an_unknown_preset_fails_when_the_warmup_config_is_constructed() -> None:
    message = "warmup.model_preset: expected one of ['small', 'tiny'], got 'huge'"
    with pytest.raises(ValueError, match=re.escape(message)):
        WarmupConfig(model_preset="huge")
    assert WarmupConfig(model_preset="small").model_preset == "small"


def test_a_presets_table_that_is_not_a_literal_is_a_loud_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "config.py"
    source.write_text("PRESETS: dict[str, dict[str, int]] = dict(tiny={})\n")
    monkeypatch.setattr(model_presets, "_config_source", lambda: source)
    message = f"{source}: PRESETS: expected a non-empty literal dict keyed by name, got dict(tiny={{}})"
    with pytest.raises(ImportError, match=re.escape(message)):
        model_preset_names.__wrapped__()
    source.write_text("PRESET_SIZES = {}\n")
    absent = f"{source}: expected a module-level literal PRESETS dict, got none"
    with pytest.raises(ImportError, match=re.escape(absent)):
        model_preset_names.__wrapped__()
