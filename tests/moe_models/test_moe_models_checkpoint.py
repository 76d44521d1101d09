"""Checkpoints and numpy weight snapshots: layouts, in-place loading, strictness."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from moe_models import (
    MoEConfig,
    MoEForCausalLM,
    build_char_tokenizer,
    load_pretrained,
    load_state_dict_numpy,
    load_tokenizer,
    save_pretrained,
    state_dict_numpy,
)
from safetensors import safe_open

CONFIG = MoEConfig.preset("tiny", vocab_size=30, num_hidden_layers=2, num_experts=4, tie_word_embeddings=True)


def _model(seed: int) -> MoEForCausalLM:
    torch.manual_seed(seed)
    return MoEForCausalLM(CONFIG).eval()


def test_saved_checkpoint_uses_per_expert_keys_and_reloads_identically(tmp_path: Path) -> None:
    model = _model(0)
    tokenizer = build_char_tokenizer("abcdefghij")
    save_pretrained(model, tmp_path, tokenizer=tokenizer)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "model.layers.0.mlp.experts.3.gate_proj.weight" in keys
    assert "model.layers.1.mlp.experts.0.down_proj.weight" in keys
    assert not any(k.endswith("gate_up_proj") for k in keys)
    assert "lm_head.weight" not in keys  # tied
    assert json.loads((tmp_path / "config.json").read_text())["num_experts"] == 4
    reloaded = load_pretrained(tmp_path)
    ids = torch.randint(0, 30, (2, 8))
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, model(ids).logits)
    assert reloaded.lm_head.weight is reloaded.model.embed_tokens.weight
    assert load_tokenizer(tmp_path).encode("jab") == tokenizer.encode("jab")


@pytest.mark.parametrize("disk_layout", [False, True])
def test_numpy_snapshot_loads_in_place_into_another_model(disk_layout: bool) -> None:
    source, target = _model(1), _model(2)
    params_before = {name: p for name, p in target.named_parameters()}
    state = state_dict_numpy(source, disk_layout=disk_layout)
    assert all(isinstance(v, np.ndarray) for v in state.values())
    load_state_dict_numpy(target, state)
    for name, p in target.named_parameters():
        assert p is params_before[name]  # same Parameter objects: compiled graphs stay valid
        assert torch.equal(p, dict(source.named_parameters())[name])


def test_numpy_snapshot_with_wrong_shape_or_keys_is_rejected() -> None:
    model = _model(0)
    state = state_dict_numpy(model)
    with pytest.raises(ValueError, match="missing"):
        load_state_dict_numpy(model, {k: v for k, v in state.items() if k != "model.norm.weight"})
    bad = dict(state)
    bad["model.norm.weight"] = np.zeros(3, dtype=np.float32)
    with pytest.raises(ValueError, match="shape"):
        load_state_dict_numpy(model, bad)


def test_load_pretrained_without_config_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"config\.json"):
        load_pretrained(tmp_path)
