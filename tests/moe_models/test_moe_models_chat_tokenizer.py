"""The byte-level BPE chat tokenizer: digits one per token, text of the corpus' bytes round-trips and other text is
refused, a vocabulary the corpus sizes, the same files from the same corpus, and transformers' AutoTokenizer loading it
with the same ids and chat template."""

from __future__ import annotations

import os
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models import ChatTokenizer, load_tokenizer, train_chat_tokenizer
from moe_models.bpe_training import SPECIAL_TOKENS

SORTS = [
    f"<|im_start|>user\nsort:{d}=<|im_end|>\n<|im_start|>assistant\n{''.join(sorted(d))}<|im_end|>\n"
    for d in ("3141592", "2718", "16180339", "577215", "1414", "99", "8675309", "1234567890")
]
ALPHABET = string.printable + "éß中😀"  # ASCII letters, digits, punctuation and whitespace; 2-, 3- and 4-byte chars
CORPUS = [*SORTS, "<|im_start|>system\n<|im_end|>\n<|im_start|>tool\n", ALPHABET]
TOK = train_chat_tokenizer(CORPUS)
ROLES = ("system", "user", "assistant", "tool")
TEXT = st.text(st.sampled_from(ALPHABET), max_size=30)
MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": TEXT}), min_size=1, max_size=5)


def test_digits_are_one_token_each_and_the_corpus_words_are_merged() -> None:
    assert [TOK.decode([i]) for i in TOK.encode("sort:90210=")] == ["sort", ":", "9", "0", "2", "1", "0", "="]
    assert len(TOK.encode("user")) == len(TOK.encode("assistant")) == 1
    assert TOK.encode("<|im_start|>user\n")[0] == TOK.vocab()["<|im_start|>"]  # a special's literal is its token


def test_vocabulary_is_specials_then_the_corpus_bytes_then_its_frequent_merges() -> None:
    vocab = TOK.vocab()
    assert [vocab[t] for t in SPECIAL_TOKENS] == [0, 1, 2]
    assert TOK.special_ids == (0, None, 2) and (TOK.pad_token, TOK.eos_token) == ("<|endoftext|>", "<|im_end|>")
    corpus_bytes = len({b for c in ALPHABET for b in c.encode()})
    merges = TOK.vocab_size - len(SPECIAL_TOKENS) - corpus_bytes
    assert 0 < merges < 20  # the corpus' few words ("sort", "user", "assistant") and their parts
    capped = train_chat_tokenizer(CORPUS, max_vocab=len(SPECIAL_TOKENS) + corpus_bytes + 2)
    assert capped.vocab_size == len(SPECIAL_TOKENS) + corpus_bytes + 2
    none = train_chat_tokenizer(CORPUS, min_share=100.0)  # no pair occurs 100 times per text: no merges at all
    assert none.vocab_size == len(SPECIAL_TOKENS) + corpus_bytes


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_text_of_the_corpus_bytes_round_trips(text: str) -> None:
    assert TOK.decode(TOK.encode(text)) == text


def test_a_byte_outside_the_vocabulary_is_refused_not_dropped() -> None:
    with pytest.raises(ValueError, match=r"got characters \['ñ'\] outside the vocabulary"):
        TOK.encode("año")


def test_same_corpus_writes_the_same_files_in_another_process(tmp_path: Path) -> None:
    TOK.save(tmp_path / "here")
    script = (
        "import sys; from moe_models import train_chat_tokenizer; train_chat_tokenizer(sys.argv[2:]).save(sys.argv[1])"
    )
    env = dict(os.environ, PYTHONHASHSEED="123", RAYON_NUM_THREADS="1")
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "there"), *CORPUS], check=True, env=env)
    names = sorted(p.name for p in (tmp_path / "here").iterdir())
    assert names == ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    for name in names:
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "there" / name).read_bytes(), name


def test_load_tokenizer_reads_a_saved_chat_tokenizer(tmp_path: Path) -> None:
    TOK.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, ChatTokenizer)
    assert loaded.vocab() == TOK.vocab() and loaded.special_ids == TOK.special_ids
    assert loaded.chat_template == TOK.chat_template


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory) -> object:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("chat-tokenizer")
    TOK.save(folder)
    return transformers.AutoTokenizer.from_pretrained(str(folder))


def test_autotokenizer_loads_it_with_the_same_ids_and_specials(hf: object) -> None:
    text = "sort:31415=  and 12 + 7\n\n<|im_end|>x"
    assert hf(text, add_special_tokens=True)["input_ids"] == TOK.encode(text)  # type: ignore[operator]
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id) == TOK.special_ids  # type: ignore[attr-defined]
    assert hf.decode(TOK.encode(text)) == text  # type: ignore[attr-defined]


def test_apply_chat_template_renders_the_prompt_with_its_generation_prompt(hf: object) -> None:
    messages = [{"role": "user", "content": "sort:31415="}]
    text = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)  # type: ignore[attr-defined]
    assert text == "<|im_start|>user\nsort:31415=<|im_end|>\n<|im_start|>assistant\n"
    assert text == TOK.render(messages, add_generation_prompt=True)
    ids = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)  # type: ignore[attr-defined]
    assert ids["input_ids"] == TOK.encode(text)


@settings(max_examples=100, deadline=None)
@given(MESSAGES, st.booleans())
def test_render_equals_transformers_apply_chat_template(hf: object, messages: list[dict[str, str]], gen: bool) -> None:
    ours = TOK.render(messages, add_generation_prompt=gen)
    theirs = hf.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)  # type: ignore[attr-defined]
    assert ours == theirs
