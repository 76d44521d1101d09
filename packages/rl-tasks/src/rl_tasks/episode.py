"""Episodes as token ids, built turn by turn: the prompt, then after each model turn the ids the environment appends.

Every context strictly extends the previous one (the routing rule: rows are appended by position only), so an
episode never re-encodes what is already in the context: after a model turn it encodes only the text the prompt
format adds next. The model's own turn stays the ids it sampled.

- `ChatEpisode`: the tokenizer's chat template renders the conversation (`messages`, then one assistant message per
  model turn and one `tool` message per observation). After a turn it renders the conversation with the turn and the
  observation (and the generation prompt) and encodes the text past the turn's end: the rest of the assistant
  message after its EOS, the tool message and the generation prompt. A turn the engine cut off before EOS gets the
  EOS text from the template too. The template must be prefix-stable in text (checked on every turn): the
  rendering before a turn, the turn's text and the EOS token are a prefix of the rendering after it.
- `PlainEpisode`: the prompt text encoded as is (after the tokenizer's BOS when it has one); an observation is its
  text encoded as is.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Protocol


class TaskTokenizer(Protocol):
    """What tasks need from a tokenizer (`moe_models.ChatTokenizer` and `moe_models.CharTokenizer` have it)."""

    eos_id: int
    pad_id: int | None
    vocab_size: int
    stop_ids: tuple[int, ...]  # every id that ends a response, eos_id first

    @property
    def bos_id(self) -> int | None: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str: ...


class ChatTemplateTokenizer(TaskTokenizer, Protocol):
    """A tokenizer with a chat template (`moe_models.ChatTokenizer`)."""

    eos_token: str

    def render(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool) -> str: ...


class Episode(Protocol):
    prompt_ids: list[int]

    def next_turn(self, turn_text: str, *, closed: bool, observation: str | None) -> list[int]:
        """The ids to append after a finished model turn (`turn_text`: its text, special tokens excluded; `closed`:
        it ended with EOS) so that the context opens the next model turn, with `observation` (None: none) between."""
        ...


class ChatEpisode:
    def __init__(self, tokenizer: ChatTemplateTokenizer, messages: Sequence[Mapping[str, str]]) -> None:
        self._tok = tokenizer
        self._messages = [dict(m) for m in messages]
        self._text = tokenizer.render(self._messages, add_generation_prompt=True)
        self._prompt_text = self._text

    @functools.cached_property
    def prompt_ids(self) -> list[int]:
        return self._tok.encode(self._prompt_text)

    def next_text(self, turn_text: str, observation: str | None) -> str:
        """The text the template puts after the turn's text (its EOS first), through the next generation prompt;
        the episode moves on to the next turn."""
        messages = [*self._messages, {"role": "assistant", "content": turn_text}]
        if observation is not None:
            messages.append({"role": "tool", "content": observation})
        text = self._tok.render(messages, add_generation_prompt=True)
        turn_end = len(self._text) + len(turn_text)
        if not text.startswith(self._text + turn_text + self._tok.eos_token):
            raise ValueError(
                "chat template: expected a prefix-stable rendering (the conversation so far, then the turn's text and "
                f"the EOS token {self._tok.eos_token!r}), got {text[max(0, turn_end - 40) : turn_end + 40]!r} around "
                "the turn's end"
            )
        self._messages, self._text = messages, text
        return text[turn_end:]

    def next_turn(self, turn_text: str, *, closed: bool, observation: str | None) -> list[int]:
        text = self.next_text(turn_text, observation)
        return self._tok.encode(text[len(self._tok.eos_token) :] if closed else text)


class PlainEpisode:
    def __init__(self, tokenizer: TaskTokenizer, prompt: str) -> None:
        self._tok = tokenizer
        bos = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
        self.prompt_ids = [*bos, *tokenizer.encode(prompt)]

    def next_turn(self, turn_text: str, *, closed: bool, observation: str | None) -> list[int]:
        return [] if observation is None else self._tok.encode(observation)
