"""Renderer: a task's prompts, demonstrations and responses under its prompt format (`task.prompt_format`).

- `chat` (the default, verl's convention): the prompt is the example's chat messages (a string prompt is one user
  message) rendered with the tokenizer's chat template and its generation prompt; each model turn is an assistant
  message closed by the tokenizer's EOS, each tool observation a `tool` message (`rl_tasks.episode.ChatEpisode`).
- `plain`: the prompt text encoded as is, after the tokenizer's BOS when it has one (for data whose prompts are
  already rendered); a model turn is its text then EOS, an observation its text (`rl_tasks.episode.PlainEpisode`).

A response's text, what the reward function reads, is the same in both formats: the model turns' texts (special
tokens dropped) with each observation's text between them, never the template's markup.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from rl_tasks.episode import ChatEpisode, ChatTemplateTokenizer, Episode, PlainEpisode, TaskTokenizer
from rl_tasks.example import TaskExample
from rl_tasks.task import Piece

PromptFormat = Literal["chat", "plain"]
PROMPT_FORMATS: tuple[PromptFormat, ...] = ("chat", "plain")
_SENTINEL = "\x00observation\x00"


PROMPT_FORMAT_HELP = {
    "help": "chat: prompts rendered with the tokenizer's chat template (a string prompt is one user message); "
    "plain: the prompt text encoded as is, no template (pre-rendered data)"
}  # the metadata of the `prompt_format` field every task section has


def check_prompt_format(value: object) -> None:
    if value not in PROMPT_FORMATS:
        raise ValueError(f"task.prompt_format: expected one of {PROMPT_FORMATS}, got {value!r}")


@dataclass(frozen=True)
class Renderer:
    """Invariant: with `chat`, the tokenizer has a chat template (`render`) and an `eos_token`."""

    tokenizer: TaskTokenizer
    prompt_format: PromptFormat = "chat"

    def __post_init__(self) -> None:
        check_prompt_format(self.prompt_format)
        if self.prompt_format == "chat" and getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"task.prompt_format chat: expected a tokenizer with a chat template, got "
                f"{type(self.tokenizer).__name__} without one (use task.prompt_format plain)"
            )

    @staticmethod
    def messages(example: TaskExample) -> list[dict[str, str]]:
        """The example's chat messages; a string prompt is one user message."""
        if example.messages:
            return [{"role": m.role, "content": m.content} for m in example.messages]
        return [{"role": "user", "content": example.prompt}]

    def episode(self, example: TaskExample) -> Episode:
        if self.prompt_format == "chat":
            return ChatEpisode(cast(ChatTemplateTokenizer, self.tokenizer), self.messages(example))
        return PlainEpisode(self.tokenizer, example.prompt)

    def prompt_ids(self, example: TaskExample) -> list[int]:
        return self.episode(example).prompt_ids

    def demonstration(self, example: TaskExample, pieces: Sequence[Piece]) -> tuple[list[int], list[float]]:
        """The training sequence of one episode and its loss mask over targets: `mask[t]` is 1 where position t
        predicts (as `ids[t + 1]`) a token of a model turn or the EOS closing it; `len(mask) == len(ids) - 1`. Two
        model turns in a row are separated by what the format puts between turns (chat: a new assistant message)."""
        episode = self.episode(example)
        ids = list(episode.prompt_ids)
        mask = [0.0] * (len(ids) - 1)
        last_turn: str | None = None
        for piece in pieces:
            if piece.trainable:
                if last_turn is not None:
                    between = episode.next_turn(last_turn, closed=True, observation=None)
                    ids, mask = ids + between, mask + [0.0] * len(between)
                tokens = [*self.tokenizer.encode(piece.text), self.tokenizer.eos_id]
                ids, mask, last_turn = ids + tokens, mask + [1.0] * len(tokens), piece.text
                continue
            if last_turn is None:
                raise ValueError(f"demonstration of {example.uid!r}: expected an observation after a model turn")
            tokens = episode.next_turn(last_turn, closed=True, observation=piece.text)
            ids, mask, last_turn = ids + tokens, mask + [0.0] * len(tokens), None
        return ids, mask

    @functools.cached_property
    def _observation_wrapper(self) -> tuple[str, str]:
        """(before, after): the text a chat observation is wrapped in after a turn closed by EOS."""
        tok = cast(ChatTemplateTokenizer, self.tokenizer)
        episode = ChatEpisode(tok, [{"role": "user", "content": "x"}])
        text = episode.next_text("y", _SENTINEL)[len(tok.eos_token) :]
        before, sentinel, after = text.partition(_SENTINEL)
        if not sentinel:
            raise ValueError(f"chat template: expected the observation in its tool message, got {text!r:.200}")
        return before, after

    def observation_overhead(self) -> int:
        """The most tokens the format adds around one observation's own tokens (chat: the rest of the turn's
        assistant message, EOS included for a turn cut off before it, the tool message's markup and the next
        generation prompt; plain: none). Exact for templates that wrap a message independently of the others."""
        if self.prompt_format == "plain":
            return 0
        before, after = self._observation_wrapper
        eos = cast(ChatTemplateTokenizer, self.tokenizer).eos_token
        return len(self.tokenizer.encode(eos + before)) + len(self.tokenizer.encode(after))

    def _observation_text(self, ids: Sequence[int]) -> str:
        if self.prompt_format == "plain":
            return self.tokenizer.decode(ids, skip_special_tokens=True)
        text = self.tokenizer.decode(ids)
        before, after = self._observation_wrapper
        eos = cast(ChatTemplateTokenizer, self.tokenizer).eos_token
        body = text.removeprefix(eos) if text.startswith(eos + before) else text
        if not body.startswith(before) or not body.endswith(after) or len(body) < len(before) + len(after):
            raise ValueError(
                f"chat observation: expected its text wrapped as {before!r} ... {after!r}, got {text!r:.200}"
            )
        return body[len(before) : len(body) - len(after)]

    def response_text(self, response_ids: Sequence[int], loss_mask: Sequence[int]) -> str:
        """The text a reward reads: model tokens (`loss_mask` 1) decoded without special tokens, each run of
        environment tokens (`loss_mask` 0) as its observation's text."""
        if len(response_ids) != len(loss_mask):
            raise ValueError(
                f"response_text: expected one mask entry per id, got {len(loss_mask)} for {len(response_ids)}"
            )
        text, start = "", 0
        for end in range(1, len(response_ids) + 1):
            if end == len(response_ids) or loss_mask[end] != loss_mask[start]:
                run = response_ids[start:end]
                model = bool(loss_mask[start])
                text += self.tokenizer.decode(run, skip_special_tokens=True) if model else self._observation_text(run)
                start = end
        return text
