"""Tokenizers as Hugging Face writes them: the chat template from `chat_template.jinja` (transformers 5), a
`chat_template.json` or the config key (a string or named templates); eos equal to pad; pad null; special tokens as
strings or AddedToken dicts (or only in special_tokens_map.json); template options (Qwen3's `enable_thinking`); the
stop set of a checkpoint (config.json's eos, int or list, and generation_config.json's). And the full-size Qwen-layout
tokenizer built offline: 151,669 ids, Qwen's added tokens at Qwen's ids, digits one per token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from moe_models import ChatTokenizer, checkpoint_stop_ids, load_tokenizer, train_chat_tokenizer
from moe_models.chat_template import QWEN3_STYLE_TEMPLATE
from moe_models.full_vocab import (
    ADDED_TOKENS,
    FULL_TOKENIZER_SIZE,
    FULL_VOCAB_TOKENS,
    build_full_vocab_tokenizer,
    byte_alphabet,
)

CORPUS = ["<|im_start|>user\nsort:3141=<|im_end|>\n<|im_start|>assistant\n1134<|im_end|>\n"] * 4
USER = [{"role": "user", "content": "sort:42="}]
DROP = object()  # `_edit`: delete the key


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    tok = train_chat_tokenizer(CORPUS)
    ChatTokenizer(tok._tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=QWEN3_STYLE_TEMPLATE).save(
        folder
    )
    return folder


def _edit(folder: Path, tmp: Path, name: str = "edited", **changes: object) -> Path:
    """A copy `tmp/name` of the tokenizer folder whose tokenizer_config.json has `changes` (`DROP` deletes a key)."""
    out = tmp / name
    out.mkdir()
    for f in folder.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    config = json.loads((out / "tokenizer_config.json").read_text())
    for key, value in changes.items():
        config.pop(key, None) if value is DROP else config.__setitem__(key, value)
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def test_the_template_is_read_from_chat_template_jinja_when_the_config_has_none(saved: Path, tmp_path: Path) -> None:
    folder = _edit(saved, tmp_path, chat_template=DROP)
    (folder / "chat_template.jinja").write_text(QWEN3_STYLE_TEMPLATE)
    tok = load_tokenizer(folder)
    assert isinstance(tok, ChatTokenizer) and tok.chat_template == QWEN3_STYLE_TEMPLATE
    assert tok.render(USER, add_generation_prompt=True).endswith("<|im_start|>assistant\n")


def test_named_templates_take_the_default_one(saved: Path, tmp_path: Path) -> None:
    folder = _edit(saved, tmp_path, chat_template=[{"name": "tool_use", "template": "x"}, {"name": "default",
                   "template": QWEN3_STYLE_TEMPLATE}])  # fmt: skip
    assert load_tokenizer(folder).chat_template == QWEN3_STYLE_TEMPLATE  # type: ignore[union-attr]


def test_eos_equal_to_pad_is_accepted(saved: Path, tmp_path: Path) -> None:
    tok = load_tokenizer(_edit(saved, tmp_path, pad_token="<|im_end|>"))
    assert tok.pad_id == tok.eos_id


def test_a_null_pad_leaves_the_choice_to_the_run(saved: Path, tmp_path: Path) -> None:
    tok = load_tokenizer(_edit(saved, tmp_path, pad_token=None))
    assert tok.pad_id is None and tok.special_ids[2] == tok.eos_id


def test_specials_as_added_token_dicts_or_only_in_the_special_tokens_map(saved: Path, tmp_path: Path) -> None:
    as_dict = load_tokenizer(_edit(saved, tmp_path, "dict", eos_token={"content": "<|im_end|>", "special": True}))
    assert as_dict.eos_id == as_dict.vocab()["<|im_end|>"]
    only_map = load_tokenizer(_edit(saved, tmp_path, "map", eos_token=DROP))  # special_tokens_map.json names it
    assert only_map.eos_id == as_dict.eos_id


def test_an_eos_absent_from_the_vocabulary_is_refused(saved: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"special token '<\|eot\|>': got absent from the vocabulary"):
        load_tokenizer(_edit(saved, tmp_path, eos_token="<|eot|>"))


def test_template_options_reach_the_template(saved: Path) -> None:
    plain = load_tokenizer(saved).render(USER, add_generation_prompt=True)  # type: ignore[union-attr]
    off = load_tokenizer(saved, template_options={"enable_thinking": False})
    assert off.render(USER, add_generation_prompt=True) == plain + "<think>\n\n</think>\n\n"  # type: ignore[union-attr]


def test_the_stop_set_joins_the_tokenizer_eos_with_the_checkpoints(saved: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 0}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    assert checkpoint_stop_ids(tmp_path) == (0, 2)
    tok = load_tokenizer(saved, checkpoint=tmp_path)
    assert tok.stop_ids == (tok.eos_id, 0)  # eos first, then the checkpoint's other ids
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 10**6}))
    with pytest.raises(ValueError, match=r"stop ids: got \[1000000\], expected ids of the tokenizer's vocabulary"):
        load_tokenizer(saved, checkpoint=tmp_path)


@pytest.fixture(scope="module")
def full() -> ChatTokenizer:
    return build_full_vocab_tokenizer(["Natalia sold 48 clips in April and half as many in May."] * 3)


def test_the_full_size_tokenizer_has_qwens_layout(full: ChatTokenizer) -> None:
    vocab = full.vocab()
    assert full.vocab_size == FULL_TOKENIZER_SIZE == 151_669
    assert [vocab[t] for t, _ in ADDED_TOKENS] == list(range(FULL_VOCAB_TOKENS, FULL_TOKENIZER_SIZE))
    assert (vocab["<|endoftext|>"], vocab["<|im_start|>"], vocab["<|im_end|>"]) == (151_643, 151_644, 151_645)
    assert [vocab[c] for c in byte_alphabet()[:3]] == [0, 1, 2] and vocab["!"] == 0
    assert full.special_ids == (151_643, None, 151_645)


def test_the_full_size_tokenizer_splits_digits_and_round_trips_any_text(full: ChatTokenizer) -> None:
    text = "Natalia sold 48 clips, 3.5 each! año 中文 😀\n<|im_end|>"
    ids = full.encode(text)
    assert full.decode(ids) == text
    assert [full.decode([i]) for i in full.encode(" 1234")] == [" ", "1", "2", "3", "4"]
    assert full.encode("Natalia") == [full.vocab()["Natalia"]]  # a word of the texts it learned from


def test_transformers_loads_the_full_size_tokenizer_with_the_same_ids(full: ChatTokenizer, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    full.save(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = "Natalia sold 48 clips, año 中文<|im_end|>"
    assert hf(text, add_special_tokens=False)["input_ids"] == full.encode(text)
    rendered = hf.apply_chat_template(USER, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    ours = load_tokenizer(tmp_path, template_options={"enable_thinking": False})
    assert rendered == ours.render(USER, add_generation_prompt=True)  # type: ignore[union-attr]
