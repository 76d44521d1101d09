"""Character tokenizer: round trip, specials, offline AutoTokenizer load."""

from __future__ import annotations

from pathlib import Path

import pytest
from moe_models import build_char_tokenizer, load_tokenizer

ALPHABET = "0123456789+-= abc\n"


def test_encode_decode_round_trip_keeps_spaces_and_newlines() -> None:
    tok = build_char_tokenizer(ALPHABET)
    text = "12 + 7 = 19\nabc"
    ids = tok.encode(text)
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.vocab_size == 3 + len(ALPHABET)
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)


def test_special_tokens_encode_as_one_id_and_can_be_skipped() -> None:
    tok = build_char_tokenizer(ALPHABET)
    ids = tok.encode("<bos>1+1<eos>")
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and len(ids) == 5
    assert tok.decode(ids, skip_special_tokens=True) == "1+1"


def test_unknown_character_and_bad_id_raise() -> None:
    tok = build_char_tokenizer(ALPHABET)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.encode("xyz")
    with pytest.raises(ValueError, match="expected ids"):
        tok.decode([tok.vocab_size])


def test_saved_tokenizer_loads_offline_in_transformers_with_same_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    tok = build_char_tokenizer(ALPHABET)
    tok.save(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (tmp_path / name).exists()
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = "3 + 4 = 7\nab"
    assert hf(text)["input_ids"] == tok.encode(text)
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id) == (0, 1, 2)
    assert hf.decode(tok.encode(text)) == text
    assert load_tokenizer(tmp_path).encode(text) == tok.encode(text)


def test_duplicate_characters_are_dropped_and_multi_char_entries_rejected() -> None:
    assert build_char_tokenizer("aab").vocab_size == 5
    with pytest.raises(ValueError, match="single characters"):
        build_char_tokenizer(["ab", "c"])
