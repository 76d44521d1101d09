"""A tokenizer at production size, built offline: Qwen's layout (151,643 byte-level BPE tokens, then 26 added
tokens from `<|endoftext|>` to `</think>`, 151,669 ids in all) and a checkpoint embedding padded to 151,936 rows, as
Qwen2.5 and Qwen3 checkpoints ship. Nothing is downloaded: the first merges are learned from the texts given (so a
task's words are single tokens, as they would be in a real vocabulary), the rest are filler merges (two- and
three-letter strings) that make up the size.

The pre-tokenizer is Qwen2's (digits one per token, contractions, letter runs with one leading non-letter,
punctuation runs, line breaks, spaces), with NFC normalisation and byte-level decoding, so encoding and decoding
behave as a real Qwen tokenizer's do; `Qwen2Tokenizer` is the class transformers builds from the files.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterable, Iterator

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from moe_models.chat_template import QWEN3_STYLE_TEMPLATE
from moe_models.chat_tokenizer import ChatTokenizer

FULL_VOCAB_TOKENS = 151_643  # byte-level BPE tokens: 256 bytes + merges
FULL_VOCAB_ROWS = 151_936  # embedding and head rows of the checkpoints (Qwen2.5 and Qwen3 pad to a multiple of 128)

# Qwen3's added tokens in id order from FULL_VOCAB_TOKENS, and whether each is special (the tool-call and think
# markers are not: they decode as text).
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", True), ("<|fim_middle|>", True), ("<|fim_suffix|>", True), ("<|fim_pad|>", True),
    ("<|repo_name|>", True), ("<|file_sep|>", True), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
)  # fmt: skip
FULL_TOKENIZER_SIZE = FULL_VOCAB_TOKENS + len(ADDED_TOKENS)  # 151,669

# Qwen2's pre-tokenizer split.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LEARNED_MERGES = 2_000  # at most this many merges come from the texts; the rest are filler


@functools.cache
def byte_alphabet() -> tuple[str, ...]:
    """The 256 characters byte-level BPE writes bytes as, in GPT-2's id order: the printable bytes as themselves,
    then every other byte as the next code point from U+0100."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    others = [b for b in range(256) if b not in printable]
    return (*map(chr, printable), *(chr(256 + i) for i in range(len(others))))


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )


def _learned_merges(texts: Iterable[str]) -> list[tuple[str, str]]:
    """Up to `_LEARNED_MERGES` merges a byte-level BPE learns from `texts` (pairs seen at least twice)."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = _pre_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=256 + _LEARNED_MERGES,
        min_frequency=2,
        initial_alphabet=list(byte_alphabet()),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]  # type: ignore[misc]


def _filler(alphabet: str) -> Iterator[tuple[str, str]]:
    """Merges spelling every two-character, then every three-character string over `alphabet`."""
    for a, b in itertools.product(alphabet, repeat=2):
        yield a, b
    for a, b, c in itertools.product(alphabet, repeat=3):
        yield a + b, c


def _bpe_model(texts: Iterable[str]) -> models.BPE:
    vocab = {c: i for i, c in enumerate(byte_alphabet())}
    merges: list[tuple[str, str]] = []

    def add(pair: tuple[str, str]) -> None:
        token = pair[0] + pair[1]
        if token not in vocab and pair[0] in vocab and pair[1] in vocab and len(vocab) < FULL_VOCAB_TOKENS:
            vocab[token] = len(vocab)
            merges.append(pair)

    for pair in _learned_merges(texts):
        add(pair)
    letters = "Ġ" + "abcdefghijklmnopqrstuvwxyz" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + ".,-_'"
    for pair in _filler(letters):
        if len(vocab) == FULL_VOCAB_TOKENS:
            break
        add(pair)
    if len(vocab) != FULL_VOCAB_TOKENS:
        raise AssertionError(f"full vocabulary: got {len(vocab)} tokens, expected {FULL_VOCAB_TOKENS}")
    return models.BPE(vocab=vocab, merges=merges, ignore_merges=False)


def build_full_vocab_tokenizer(texts: Iterable[str], *, chat_template: str = QWEN3_STYLE_TEMPLATE) -> ChatTokenizer:
    """A 151,669-id Qwen-layout tokenizer whose first merges are learned from `texts`: eos `<|im_end|>`, pad
    `<|endoftext|>`, no BOS, and a Qwen3-style chat template (`enable_thinking` among its options). Deterministic:
    the same texts give the same files."""
    tok = Tokenizer(_bpe_model(texts))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    for content, special in ADDED_TOKENS:
        added = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False)
        if special:
            tok.add_special_tokens([added])
        else:
            tok.add_tokens([added])
    if tok.get_vocab_size() != FULL_TOKENIZER_SIZE:
        raise AssertionError(f"full vocabulary: got {tok.get_vocab_size()} ids, expected {FULL_TOKENIZER_SIZE}")
    return ChatTokenizer(tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=chat_template)
