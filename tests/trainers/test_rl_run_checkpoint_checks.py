"""A checkpoint the user brings is checked before anything is built (`trainers.recipe.setup.check_run`, which the apps
run
while parsing the command line): tokenizer ids beyond the embedding, an eos id outside the tokenizer, a chat template
that does not render a user message and a response budget shorter than the longest answer are refused with
got/expected; the run scores the tokenizer's ids only, stops at every eos id the checkpoint declares, picks a pad id
that no text holds when the tokenizer names none, and a dataset task's default budget leaves room to reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM, save_pretrained
from rl_tasks.dataset_task import RESPONSE_TOKENS, DatasetTaskConfig
from rl_tasks.model_config import ModelConfig
from rl_tasks.task_tokenizer import build_task_tokenizer
from trainers.recipe.config import RecipeConfig, RolloutConfig, SortTaskConfig
from trainers.recipe.setup import check_run

TASK = SortTaskConfig(train_size=50, val_size=4)
PADDING_ROWS = 8


def _checkpoint(folder: Path, *, extra_rows: int = PADDING_ROWS, generation_eos: object = None) -> Path:
    """A tiny Qwen3-MoE whose embedding has `extra_rows` rows beyond the task's tokenizer, saved with it."""
    tok = build_task_tokenizer(TASK.build())
    config = MoEConfig.preset(
        "tiny", vocab_size=tok.vocab_size + extra_rows, num_hidden_layers=1, eos_token_id=tok.eos_id
    )
    torch.manual_seed(0)
    save_pretrained(MoEForCausalLM(config), folder, tok)
    if generation_eos is not None:
        (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": generation_eos}))
    return folder


def _edit_tokenizer(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(changes)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def _cfg(path: Path, task: object = TASK, **rollout: object) -> RecipeConfig:
    return RecipeConfig(
        task=task,  # type: ignore[arg-type]
        model=ModelConfig(path=str(path)),
        rollout=RolloutConfig(**rollout),  # type: ignore[arg-type]
    )


def test_the_run_scores_the_tokenizers_ids_and_stops_at_every_declared_eos(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt", generation_eos=[3, 0])
    plan = check_run(_cfg(ckpt))
    tok = plan.tokenizer
    assert plan.vocab_size == tok.vocab_size  # the embedding has 8 rows more: never scored
    assert tok.stop_ids == (tok.eos_id, 3, 0)
    assert plan.pad_id == tok.pad_id


def test_a_tokenizer_with_more_ids_than_the_embedding_is_refused(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt", extra_rows=0)
    config = json.loads((ckpt / "config.json").read_text())
    config["vocab_size"] -= 2  # a tokenizer meant for another checkpoint
    (ckpt / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"tokenizer: got \d+ ids, expected at most the checkpoint's \d+ embedding"):
        check_run(_cfg(ckpt))


def test_an_eos_id_outside_the_tokenizer_is_refused(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt", generation_eos=[10_000])
    with pytest.raises(ValueError, match=r"stop ids: got \[10000\], expected ids of the tokenizer's vocabulary"):
        check_run(_cfg(ckpt))


def test_a_chat_template_that_drops_the_user_message_is_refused(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt")
    _edit_tokenizer(ckpt, chat_template="{{ '<|im_start|>assistant\\n' }}")
    with pytest.raises(ValueError, match="chat template: expected a user message's text in its rendering"):
        check_run(_cfg(ckpt))


def test_a_budget_shorter_than_the_longest_answer_is_refused(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt")
    with pytest.raises(ValueError, match=r"rollout.max_new_tokens: got 4 tokens, expected at least 13"):
        check_run(_cfg(ckpt, max_new_tokens=4))  # the longest sort answer is 12 digits, then the EOS


def test_a_null_pad_is_the_first_padding_row_or_else_the_eos(tmp_path: Path) -> None:
    padded = _checkpoint(tmp_path / "padded")
    _edit_tokenizer(padded, pad_token=None)
    with pytest.warns(UserWarning, match=r"no pad_token; batches are padded with id \d+ \(the first embedding row"):
        plan = check_run(_cfg(padded))
    assert plan.pad_id == plan.tokenizer.vocab_size
    exact = _checkpoint(tmp_path / "exact", extra_rows=0)
    _edit_tokenizer(exact, pad_token=None)
    with pytest.warns(UserWarning, match=r"\(the EOS id\)"):
        assert check_run(_cfg(exact)).pad_id == check_run(_cfg(exact)).tokenizer.eos_id


def test_a_dataset_task_leaves_room_to_reason_by_default(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"prompt": f"sort:{d}=", "reward_model": {"ground_truth": d}}) + "\n" for d in "123456")
    )
    task = DatasetTaskConfig(train_file=str(rows), val_size=2, default_data_source="toy")
    plan = check_run(RecipeConfig(task=task))
    assert plan.max_new_tokens == RESPONSE_TOKENS == 1024
    assert (
        check_run(RecipeConfig(task=DatasetTaskConfig(**{**task.__dict__, "response_tokens": 0}))).max_new_tokens == 2
    )
