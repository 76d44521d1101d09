"""The policy out (`python -m trainers.recipe.export`): a checkpoint's backend state, under the run's base checkpoint
and
tokenizer, becomes its family's Hugging Face folder that transformers' `AutoModelForCausalLM` loads with logits equal
to ours (1e-5), for every family; generation_config.json lists every eos id the run stops at; a folder that is no
checkpoint exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from moe_models import FAMILY_NAMES, MoEConfig, MoEForCausalLM, build_char_tokenizer, load_pretrained, save_pretrained
from trainers.backend import BackendState
from trainers.recipe.export import POLICY_DIR, export_checkpoint, main

TOK = build_char_tokenizer("0123456789+=")
IDS = torch.tensor([[3, 4, 5, 13, 6, 7, 14, 8, 9]])


def _run_with_checkpoint(root: Path, family: str) -> tuple[Path, MoEForCausalLM]:
    """A run directory whose config.toml names a base checkpoint of `family` (2 rows of padding beyond the
    tokenizer) and whose checkpoint 3 holds other (trained) weights."""
    config = MoEConfig.preset("tiny", vocab_size=TOK.vocab_size + 2, model_type=family, eos_token_id=TOK.eos_id)
    torch.manual_seed(0)
    base = save_pretrained(MoEForCausalLM(config), root / "base", TOK)
    (base / "generation_config.json").write_text(json.dumps({"eos_token_id": [TOK.eos_id, 1]}))
    torch.manual_seed(1)
    trained = MoEForCausalLM(config).eval()
    run = root / "run"
    (run / "checkpoints" / "3").mkdir(parents=True)
    (run / "config.toml").write_text(f'[model]\npath = "{base}"\n')
    state = {f"model.{k}": v for k, v in trained.state_dict().items()}
    BackendState(state, version=3).save(run / "checkpoints" / "3")
    return run / "checkpoints" / "3", trained


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_an_exported_policy_loads_in_transformers_with_our_logits(family: str, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    checkpoint, trained = _run_with_checkpoint(tmp_path, family)
    policy = export_checkpoint(checkpoint)
    assert policy == checkpoint / POLICY_DIR
    assert json.loads((policy / "generation_config.json").read_text())["eos_token_id"] == [TOK.eos_id, 1]
    ours = load_pretrained(policy).eval()
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(policy), dtype=torch.float32).eval()
    with torch.no_grad():
        want, got, exported = trained(IDS).logits, hf(IDS).logits, ours(IDS).logits
    torch.testing.assert_close(exported, want, rtol=0, atol=1e-6)  # the export is the trained weights
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert transformers.AutoTokenizer.from_pretrained(str(policy)).convert_tokens_to_ids("<eos>") == TOK.eos_id


def test_exporting_a_folder_that_holds_no_checkpoint_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path)])
    assert exit_info.value.code == 2
    assert "expected a checkpoint folder with backend.safetensors" in capsys.readouterr().err
