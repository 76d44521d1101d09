"""Training a small byte-level BPE chat tokenizer offline with Hugging Face `tokenizers`.

Pre-tokenization (before the byte-level mapping) isolates every digit (as Qwen2's tokenizer does, so a number is
one token per digit and arithmetic stays digit by digit) and every line break (so a merge never spans the `\\n` that
ends a chat template's role header, which keeps chat renderings prefix-stable token for token); other pieces are a
letter run or a punctuation run, each with an optional leading space, or a whitespace run.

The vocabulary is, in id order: the special tokens (`<|endoftext|>`: pad; `<|im_start|>`; `<|im_end|>`: eos, the
end of a model turn), one token per byte value the corpus uses, then the merges learned from the corpus. Its size is
therefore 3 + the corpus' distinct bytes + the merges, and the merges stop at `max_vocab` or when no pair of adjacent
tokens inside one piece occurs, over the whole corpus, at least `min_share` times per text (and at least twice): a
corpus of digits and a few fixed words learns only the merges that spell those words, and random letters learn none.
Text with a byte outside the vocabulary does not encode (`ChatTokenizer.encode` raises).

Why not all 256 byte tokens, as general-purpose byte-level tokenizers have: a tiny model trained for a few hundred
steps learned the calculator task far worse with 230 output tokens it never sees (AdamW moves every unused row of
the output layer by the learning rate each step); rare merges likewise give tokens too rare to learn (reversing
random letters is much harder over letter-pair tokens).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from moe_models.chat_template import CHATML_TEMPLATE, END_OF_TEXT, IM_END, IM_START
from moe_models.chat_tokenizer import ChatTokenizer

SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)

# Alternatives in order: one digit; one line break; a letter run with an optional space; a punctuation run with an
# optional space; spaces that a following word or punctuation does not take (its last space goes with it); any
# other whitespace run.
PIECE_PATTERN = r"\p{N}|\n| ?\p{L}+| ?[^\s\p{L}\p{N}]+|[^\S\n]+(?!\S)|[^\S\n]+"


def _untrained_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def _between_specials(texts: Iterable[str]) -> Iterator[str]:
    """The stretches of each text between special-token literals (the trainer does not split them out itself)."""
    split = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
    for text in texts:
        yield from (part for part in split.split(text) if part)


def train_chat_tokenizer(texts: Iterable[str], *, max_vocab: int = 512, min_share: float = 0.25) -> ChatTokenizer:
    """A byte-level BPE tokenizer trained on `texts` (special-token literals in them are skipped), with the ChatML
    template (`moe_models.chat_template.CHATML_TEMPLATE`), eos `<|im_end|>`, pad `<|endoftext|>` and no BOS.

    Deterministic: the same texts give the same tokenizer, saved byte for byte the same. `max_vocab` caps the
    vocabulary; a pair is merged only if it occurs at least `max(2, ceil(min_share * len(texts)))` times."""
    texts = list(texts)
    if not texts or max_vocab <= len(SPECIAL_TOKENS) or not min_share >= 0:
        raise ValueError(
            f"train_chat_tokenizer: expected texts, max_vocab > {len(SPECIAL_TOKENS)} and min_share >= 0, got "
            f"{len(texts)} texts, {max_vocab}, {min_share}"
        )
    tok = _untrained_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=max_vocab,
        min_frequency=max(2, math.ceil(min_share * len(texts))),
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
    )
    tok.train_from_iterator(_between_specials(texts), trainer=trainer)
    if tok.get_vocab_size() <= len(SPECIAL_TOKENS):
        raise ValueError("train_chat_tokenizer: the texts hold nothing but special tokens; expected some text")
    return ChatTokenizer(tok, eos_token=IM_END, pad_token=END_OF_TEXT, chat_template=CHATML_TEMPLATE)
