"""Character-level tokenizer built offline with `tokenizers`, saved in a layout `AutoTokenizer` loads, and
`load_tokenizer`, which reads either it or a `ChatTokenizer` folder.

The tasks' tokenizer is the byte-level BPE `ChatTokenizer` (`moe_models.bpe_training`); this one stays as the
smallest tokenizer a test can build: one id per character of a given alphabet, no chat template."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from moe_models.chat_tokenizer import ChatTokenizer, read_chat_template

_TOKENIZER_FILE = "tokenizer.json"
_CONFIG_FILE = "tokenizer_config.json"
_SPECIAL_MAP_FILE = "special_tokens_map.json"


class CharTokenizer:
    """One token per character; ids 0..2 are the special tokens (pad, bos, eos) in that order.

    encode never adds special tokens; text containing a special token's literal form encodes it as that token.
    """

    def __init__(self, tokenizer: Tokenizer, pad_token: str, bos_token: str, eos_token: str) -> None:
        self._tok = tokenizer
        self.pad_token, self.bos_token, self.eos_token = pad_token, bos_token, eos_token
        vocab = tokenizer.get_vocab()
        for token in (pad_token, bos_token, eos_token):
            if token not in vocab:
                raise ValueError(f"special token {token!r}: got absent from the vocabulary, expected present")
        self.pad_id, self.bos_id, self.eos_id = vocab[pad_token], vocab[bos_token], vocab[eos_token]
        self._specials = {pad_token, bos_token, eos_token}
        self._chars = {t for t in vocab if t not in self._specials}
        self.stop_ids: tuple[int, ...] = (self.eos_id,)
        self.template_options: dict[str, object] = {}

    def with_stop_ids(self, stop_ids: Sequence[int]) -> CharTokenizer:
        """The same tokenizer whose responses also end at `stop_ids`."""
        bad = [i for i in stop_ids if not 0 <= int(i) < self.vocab_size]
        if bad:
            raise ValueError(f"stop ids: got {bad}, expected ids of the tokenizer's vocabulary [0, {self.vocab_size})")
        out = CharTokenizer(self._tok, self.pad_token, self.bos_token, self.eos_token)
        out.stop_ids = tuple(dict.fromkeys([*self.stop_ids, *map(int, stop_ids)]))
        return out

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def vocab(self) -> dict[str, int]:
        """Token string -> id, specials included (two tokenizers agree iff their vocabs and specials do)."""
        return dict(self._tok.get_vocab())

    @property
    def special_ids(self) -> tuple[int, int, int]:
        return self.pad_id, self.bos_id, self.eos_id

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - self._chars - set("".join(self._specials)))
        if unknown:
            raise ValueError(f"encode: got characters {unknown[:10]} outside the vocabulary")
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int], *, skip_special_tokens: bool = False) -> str:
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"decode: got ids {bad[:10]}, expected ids in [0, {self.vocab_size})")
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def save(self, directory: str | Path) -> Path:
        """Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json (PreTrainedTokenizerFast)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self._tok.save(str(path / _TOKENIZER_FILE))
        specials = {"pad_token": self.pad_token, "bos_token": self.bos_token, "eos_token": self.eos_token}
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 1_000_000,
            "clean_up_tokenization_spaces": False,
            "add_bos_token": False,
            "add_eos_token": False,
            **specials,
        }
        (path / _CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        (path / _SPECIAL_MAP_FILE).write_text(json.dumps(specials, indent=2) + "\n")
        return path


def build_char_tokenizer(
    chars: str | list[str], special: tuple[str, str, str] = ("<pad>", "<bos>", "<eos>")
) -> CharTokenizer:
    """chars: the alphabet (duplicates dropped, first occurrence kept); special: (pad, bos, eos) tokens."""
    if len(special) != 3 or len(set(special)) != 3:
        raise ValueError(f"special: got {special!r}, expected three distinct tokens (pad, bos, eos)")
    alphabet = list(dict.fromkeys(chars))
    bad = [c for c in alphabet if len(c) != 1]
    if bad or not alphabet:
        raise ValueError(f"chars: got {bad[:10] or 'nothing'}, expected a non-empty list of single characters")
    clash = [c for c in alphabet if c in special]
    if clash:
        raise ValueError(f"chars: got {clash} that equal special tokens")
    vocab = {token: i for i, token in enumerate([*special, *alphabet])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=special[0]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(special))
    return CharTokenizer(tok, *special)


def load_tokenizer(
    directory: str | Path,
    *,
    template_options: Mapping[str, object] | None = None,
    checkpoint: str | Path | None = None,
) -> CharTokenizer | ChatTokenizer:
    """Loads a tokenizer folder: what `CharTokenizer.save` wrote (a word-level model, no chat template), else any
    Hugging Face tokenizer (`ChatTokenizer.load`, with `template_options`). `checkpoint`: a model folder whose
    config.json and generation_config.json eos ids also end responses (`stop_ids`)."""
    path = Path(directory)
    config_file = path / _CONFIG_FILE
    if not (path / _TOKENIZER_FILE).exists() or not config_file.exists():
        raise ValueError(f"{path}: got no {_TOKENIZER_FILE}/{_CONFIG_FILE}, expected a saved tokenizer")
    config = json.loads(config_file.read_text())
    if read_chat_template(path, config) is None and '"type": "WordLevel"' in (path / _TOKENIZER_FILE).read_text():
        tok = Tokenizer.from_file(str(path / _TOKENIZER_FILE))
        char = CharTokenizer(tok, config["pad_token"], config["bos_token"], config["eos_token"])
        return char if checkpoint is None else char.with_stop_ids(checkpoint_stop_ids(checkpoint))
    chat = ChatTokenizer.load(path, template_options=template_options)
    return chat if checkpoint is None else chat.with_stop_ids(checkpoint_stop_ids(checkpoint))


def checkpoint_stop_ids(directory: str | Path) -> tuple[int, ...]:
    """The eos ids a checkpoint folder declares: config.json's `eos_token_id` and generation_config.json's (each an
    int, a list or absent), in that order, without repeats."""
    ids: list[int] = []
    for name in ("config.json", "generation_config.json"):
        file = Path(directory) / name
        eos = json.loads(file.read_text()).get("eos_token_id") if file.is_file() else None
        for value in eos if isinstance(eos, list) else [] if eos is None else [eos]:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{file}: eos_token_id: expected an int or a list of ints, got {eos!r}")
            ids.append(value)
    return tuple(dict.fromkeys(ids))
