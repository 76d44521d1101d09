"""The model section's family and size preset are checked when it is constructed, against what moe_models defines
(read from its source, without torch); a checkpoint directory is checked for its family and tokenizer files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from moe_models.config import FAMILY_NAMES, FULL_VOCAB_PRESETS, PRESETS, MoEConfig
from rl_tasks import model_presets
from rl_tasks.model_config import ModelConfig
from rl_tasks.model_presets import full_vocab_presets, model_family_names, model_preset_names


def test_preset_names_are_those_moe_models_defines() -> None:
    assert model_preset_names() == tuple(sorted(PRESETS)) == ("base", "small", "tiny")
    assert full_vocab_presets() == FULL_VOCAB_PRESETS == ("small", "base")
    for name in model_preset_names():
        assert MoEConfig.preset(name, vocab_size=16).hidden_size == PRESETS[name]["hidden_size"]


def test_family_names_are_those_moe_models_defines() -> None:
    assert model_family_names() == FAMILY_NAMES


def test_an_unknown_preset_or_family_fails_when_the_model_config_is_constructed() -> None:
    message = "model.preset: expected one of ['base', 'small', 'tiny'], got 'huge'"
    with pytest.raises(ValueError, match=re.escape(message)):
        ModelConfig(preset="huge")
    with pytest.raises(ValueError, match=re.escape(f"model.family: expected one of {list(FAMILY_NAMES)}, got 'llama'")):
        ModelConfig(family="llama")
    assert ModelConfig(family="mixtral", preset="small").resolved_family() == "mixtral"


def test_a_checkpoint_directory_gives_its_family_or_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"expected a checkpoint directory with config\.json"):
        ModelConfig(path=str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match=r"has no tokenizer\.json, tokenizer_config\.json"):
        ModelConfig(path=str(tmp_path))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_text("{}")
    with pytest.raises(ValueError, match=re.escape(f"model_type 'llama'; supported families: {list(FAMILY_NAMES)}")):
        ModelConfig(path=str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    assert ModelConfig(path=str(tmp_path)).resolved_family() == "gpt_oss"


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
