"""ChatTokenizer: a Hugging Face `tokenizers` tokenizer with its special tokens and a Jinja chat template, read from
the layouts transformers writes (4.x: the template in `tokenizer_config.json`; 5.x: in `chat_template.jinja`) and
saved in the one `transformers.AutoTokenizer.from_pretrained` (and so vLLM) loads: `tokenizer.json` and
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
CHAT_TEMPLATE_FILE = "chat_template.jinja"


class ChatTokenizer:
    """A tokenizer as Hugging Face saves it: `encode` never adds special tokens (a chat template writes them as text),
    a special token's literal form in the text encodes as that token, and text that does not survive an encode and
    decode raises (a byte-level BPE over a subset of the bytes would drop it silently).

    `eos_id` ends a model turn; `stop_ids` are every id that ends a response (`eos_id` first: the checkpoint's
    config.json and generation_config.json may add more, `moe_models.checkpoint_stop_ids`). `pad_id` is None when
    the tokenizer names no pad token (a run then chooses one, see `trainers.recipe.setup`); it may equal `eos_id`, since
    padding is told apart by lengths, never by comparing ids. `bos_id` is None without a BOS token. `chat_template`
    is None for a tokenizer without one (prompts are then plain text); `template_options` are the template's own
    variables (e.g. Qwen3's `enable_thinking`), passed on every render.

    Invariant: eos, pad and bos (when named) are tokens of the vocabulary.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        eos_token: str,
        pad_token: str | None,
        chat_template: str | None,
        bos_token: str | None = None,
        template_options: Mapping[str, object] | None = None,
        stop_ids: Sequence[int] = (),
    ) -> None:
        self._tok = tokenizer
        self.eos_token, self.pad_token, self.bos_token = eos_token, pad_token, bos_token
        self.chat_template = chat_template
        self.template_options = dict(template_options or {})
        vocab = tokenizer.get_vocab()
        for token in (eos_token, pad_token, bos_token):
            if token is not None and token not in vocab:
                raise ValueError(f"special token {token!r}: got absent from the vocabulary, expected present")
        self.eos_id = vocab[eos_token]
        self.pad_id: int | None = None if pad_token is None else vocab[pad_token]
        self.bos_id: int | None = None if bos_token is None else vocab[bos_token]
        bad = [i for i in stop_ids if not 0 <= int(i) < self.vocab_size]
        if bad:
            raise ValueError(f"stop ids: got {bad}, expected ids of the tokenizer's vocabulary [0, {self.vocab_size})")
        self.stop_ids: tuple[int, ...] = tuple(dict.fromkeys([self.eos_id, *map(int, stop_ids)]))

    def with_stop_ids(self, stop_ids: Sequence[int]) -> ChatTokenizer:
        """The same tokenizer whose responses also end at `stop_ids`."""
        return ChatTokenizer(
            self._tok,
            eos_token=self.eos_token,
            pad_token=self.pad_token,
            chat_template=self.chat_template,
            bos_token=self.bos_token,
            template_options=self.template_options,
            stop_ids=[*self.stop_ids, *stop_ids],
        )

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def vocab(self) -> dict[str, int]:
        """Token string -> id, specials included (two tokenizers agree iff their vocabs and specials do)."""
        return dict(self._tok.get_vocab())

    @property
    def special_ids(self) -> tuple[int | None, int | None, int]:
        """(pad, bos, eos) ids; pad and bos None when there is none."""
        return self.pad_id, self.bos_id, self.eos_id

    @property
    def special_tokens(self) -> dict[str, str | None]:
        return {"bos_token": self.bos_token, "eos_token": self.eos_token, "pad_token": self.pad_token}

    def encode(self, text: str) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        normalizer = self._tok.normalizer
        want = text if normalizer is None else normalizer.normalize_str(text)
        if self._tok.decode(ids, skip_special_tokens=False) != want:
            rest = want
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
        """The chat template's text for `messages` (transformers' `apply_chat_template(..., tokenize=False)` with
        the template options as keyword arguments)."""
        if self.chat_template is None:
            raise ValueError("render: the tokenizer has no chat template (expected one, or task.prompt_format plain)")
        return render_chat(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            special_tokens=self.special_tokens,
            options=self.template_options,
        )

    def save(self, directory: str | Path) -> Path:
        """Writes tokenizer.json, tokenizer_config.json (with the chat template) and special_tokens_map.json; the
        same tokenizer always writes the same bytes."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        (path / TOKENIZER_FILE).write_text(self._tok.to_str(pretty=True) + "\n")
        added = {
            str(i): {"content": t.content, "special": t.special, "lstrip": t.lstrip, "rstrip": t.rstrip,
                     "normalized": t.normalized, "single_word": t.single_word}
            for i, t in sorted(self._tok.get_added_tokens_decoder().items())
        }  # fmt: skip
        config: dict[str, object] = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 1_000_000,
            "clean_up_tokenization_spaces": False,
            "added_tokens_decoder": added,
            **self.special_tokens,
        }
        if self.chat_template is not None:
            config["chat_template"] = self.chat_template
        (path / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        specials = {k: v for k, v in self.special_tokens.items() if v is not None}
        (path / SPECIAL_MAP_FILE).write_text(json.dumps(specials, indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path, *, template_options: Mapping[str, object] | None = None) -> ChatTokenizer:
        """Reads a tokenizer folder as transformers writes it: `tokenizer.json`, `tokenizer_config.json` (special
        tokens as strings or `{"content": ...}`, falling back to `special_tokens_map.json`), and the chat template
        from `chat_template.jinja` (transformers 5), `chat_template.json` or the config's `chat_template` key (a
        string, or a list of named templates: the `default` one). `template_options`: see the class."""
        path = Path(directory)
        config = json.loads((path / CONFIG_FILE).read_text())
        specials_map = json.loads((path / SPECIAL_MAP_FILE).read_text()) if (path / SPECIAL_MAP_FILE).is_file() else {}
        names = {
            k: _token_name(config.get(k, specials_map.get(k)), k, path) for k in ("eos_token", "pad_token", "bos_token")
        }
        if names["eos_token"] is None:
            raise ValueError(f"{path / CONFIG_FILE}: eos_token: expected a token that ends a model turn, got none")
        return cls(
            Tokenizer.from_file(str(path / TOKENIZER_FILE)),
            eos_token=names["eos_token"],
            pad_token=names["pad_token"],
            bos_token=names["bos_token"],
            chat_template=read_chat_template(path, config),
            template_options=template_options,
        )


def read_chat_template(path: Path, config: Mapping[str, object]) -> str | None:
    """The folder's chat template (see `ChatTokenizer.load`), None when it has none."""
    jinja, json_file = path / CHAT_TEMPLATE_FILE, path / "chat_template.json"
    if jinja.is_file():
        return jinja.read_text()
    template = (
        json.loads(json_file.read_text()).get("chat_template") if json_file.is_file() else config.get("chat_template")
    )
    if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    if template is None:
        return None
    if not isinstance(template, str) or not template:
        raise ValueError(f"{path}: chat_template: expected a Jinja string, got {template!r:.80}")
    return template


def _token_name(value: object, key: str, path: Path) -> str | None:
    """A special token's string from tokenizer_config.json: a string, an AddedToken-style {"content": ...}, or null."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    raise ValueError(f"{path / CONFIG_FILE}: {key}: expected a token string or null, got {value!r:.80}")
