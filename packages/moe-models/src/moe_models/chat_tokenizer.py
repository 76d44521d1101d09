"""ChatTokenizer: a Hugging Face `tokenizers` tokenizer with its special tokens and a Jinja chat template, saved in
the layout `transformers.AutoTokenizer.from_pretrained` (and so vLLM) loads: `tokenizer.json` and
`tokenizer_config.json` (holding `chat_template`), plus `special_tokens_map.json`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from tokenizers import Tokenizer

from moe_models.chat_template import render_chat

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_MAP_FILE = "special_tokens_map.json"


class ChatTokenizer:
    """`encode` never adds special tokens, a special token's literal form in the text encodes as that token, and text
    with a byte the vocabulary lacks raises (a byte-level BPE over a subset of the bytes would drop it silently);
    `bos_id` is None when the tokenizer has no BOS token (ChatML prompts start with `<|im_start|>` instead).
    `eos_id` ends a model turn (the engine's stop token); `pad_id` pads batches (the model's `padding_idx`).

    Invariant: the eos, pad and (when set) bos tokens are distinct added special tokens of the vocabulary.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        eos_token: str,
        pad_token: str,
        chat_template: str,
        bos_token: str | None = None,
    ) -> None:
        self._tok = tokenizer
        self.eos_token, self.pad_token, self.bos_token = eos_token, pad_token, bos_token
        self.chat_template = chat_template
        vocab = tokenizer.get_vocab()
        specials = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
        named = [t for t in (eos_token, pad_token, bos_token) if t is not None]
        for token in named:
            if token not in vocab or token not in specials:
                raise ValueError(f"special token {token!r}: got absent from the added special tokens, expected there")
        if len(set(named)) != len(named):
            raise ValueError(f"special tokens: expected eos, pad and bos distinct, got {named}")
        self.eos_id, self.pad_id = vocab[eos_token], vocab[pad_token]
        self.bos_id: int | None = None if bos_token is None else vocab[bos_token]

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def vocab(self) -> dict[str, int]:
        """Token string -> id, specials included (two tokenizers agree iff their vocabs and specials do)."""
        return dict(self._tok.get_vocab())

    @property
    def special_ids(self) -> tuple[int, int | None, int]:
        """(pad, bos, eos) ids; bos None when there is none."""
        return self.pad_id, self.bos_id, self.eos_id

    @property
    def special_tokens(self) -> dict[str, str | None]:
        return {"bos_token": self.bos_token, "eos_token": self.eos_token, "pad_token": self.pad_token}

    def encode(self, text: str) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if self._tok.decode(ids, skip_special_tokens=False) != text:
            rest = text
            for token in self._tok.get_added_tokens_decoder().values():
                rest = rest.replace(token.content, "")
            lost = sorted(
                c for c in set(rest) if self._tok.decode(self._tok.encode(c, add_special_tokens=False).ids) != c
            )
            raise ValueError(f"encode: got characters {lost[:10]} outside the vocabulary")
        return list(ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"decode: got ids {bad[:10]}, expected ids in [0, {self.vocab_size})")
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool) -> str:
        """The chat template's text for `messages` (transformers' `apply_chat_template(..., tokenize=False)`)."""
        return render_chat(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            special_tokens=self.special_tokens,
        )

    def save(self, directory: str | Path) -> Path:
        """Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json; the same tokenizer always
        writes the same bytes."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        (path / TOKENIZER_FILE).write_text(self._tok.to_str(pretty=True) + "\n")
        added = {
            str(i): {"content": t.content, "special": t.special, "lstrip": t.lstrip, "rstrip": t.rstrip,
                     "normalized": t.normalized, "single_word": t.single_word}
            for i, t in sorted(self._tok.get_added_tokens_decoder().items())
        }  # fmt: skip
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 1_000_000,
            "clean_up_tokenization_spaces": False,
            "added_tokens_decoder": added,
            **self.special_tokens,
            "chat_template": self.chat_template,
        }
        (path / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        specials = {k: v for k, v in self.special_tokens.items() if v is not None}
        (path / SPECIAL_MAP_FILE).write_text(json.dumps(specials, indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> ChatTokenizer:
        """Reads a tokenizer folder with a `chat_template` in its tokenizer_config.json (what `save` wrote, or a
        Hugging Face tokenizer whose special tokens are plain strings)."""
        path = Path(directory)
        config = json.loads((path / CONFIG_FILE).read_text())
        template = config.get("chat_template")
        if not isinstance(template, str) or not template:
            raise ValueError(f"{path / CONFIG_FILE}: chat_template: expected a Jinja string, got {template!r:.80}")
        names = {k: _token_name(config.get(k), k, path) for k in ("eos_token", "pad_token", "bos_token")}
        if names["eos_token"] is None or names["pad_token"] is None:
            raise ValueError(f"{path / CONFIG_FILE}: expected eos_token and pad_token, got {names}")
        tok = Tokenizer.from_file(str(path / TOKENIZER_FILE))
        return cls(
            tok,
            eos_token=names["eos_token"],
            pad_token=names["pad_token"],
            bos_token=names["bos_token"],
            chat_template=template,
        )


def _token_name(value: object, key: str, path: Path) -> str | None:
    """A special token's string from tokenizer_config.json: a string, an AddedToken-style {"content": ...}, or null."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    raise ValueError(f"{path / CONFIG_FILE}: {key}: expected a token string or null, got {value!r:.80}")
