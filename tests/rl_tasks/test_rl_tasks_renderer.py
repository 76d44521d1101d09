"""Prompt formats: chat prompts by the tokenizer's template (a string is one user message), plain prompts as is,
prefix-stable multi-turn ids, and the response text a reward reads in both formats."""

from __future__ import annotations

import dataclasses
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models import ChatTokenizer, build_char_tokenizer, train_chat_tokenizer
from moe_models.chat_template import CHATML_TEMPLATE, render_chat
from rl_tasks.calculator_task import CalculatorTaskConfig
from rl_tasks.example import ChatMessage, TaskExample
from rl_tasks.renderer import Renderer
from rl_tasks.task import Piece
from rl_tasks.task_tokenizer import build_task_tokenizer, tokenizer_corpus

TASK = CalculatorTaskConfig(train_size=200, val_size=4).build()
CALC = build_task_tokenizer(TASK)
# A tokenizer over every printable ASCII character (whitespace included) and a few multi-byte ones, with merges of
# words, spaced words and the template's role names, so that merges meet every kind of piece boundary.
ALPHABET = string.printable + "éß中😀"
WORDS = "the cat, 12 dogs;  and\tthe\nbird = 3.5 birds!"
ROLES = ("system", "user", "assistant", "tool")
CHATS = [
    render_chat(CHATML_TEMPLATE, [{"role": r, "content": f"{WORDS} {i}"} for r in ROLES], add_generation_prompt=False)
    for i in range(20)
]
TOK = train_chat_tokenizer([*CHATS, ALPHABET])
CHAT = Renderer(TOK, "chat")
PLAIN = Renderer(TOK, "plain")
TEXT = st.text(st.sampled_from(ALPHABET), min_size=1, max_size=20)


def _ids(messages: list[dict[str, str]], *, generation_prompt: bool) -> list[int]:
    return TOK.encode(TOK.render(messages, add_generation_prompt=generation_prompt))


def test_a_string_prompt_is_one_user_message_with_the_generation_prompt() -> None:
    example = TaskExample("a", "calculator", "12,34:", "46")
    text = "<|im_start|>user\n12,34:<|im_end|>\n<|im_start|>assistant\n"
    assert CHAT.prompt_ids(example) == TOK.encode(text)
    assert TOK.decode(CHAT.prompt_ids(example)) == text
    pieces = ["<|im_start|>", "user", "\n", "1", "2", ",", "3", "4", ":", "<|im_end|>", "\n"]
    assert [CALC.decode([i]) for i in Renderer(CALC).prompt_ids(example)] == [
        *pieces,
        "<|im_start|>",
        "assistant",
        "\n",
    ]


def test_a_chat_list_prompt_keeps_its_roles_and_plain_joins_its_contents() -> None:
    messages = (ChatMessage("system", "add"), ChatMessage("user", "1,2:"))
    example = TaskExample("a", "calculator", "add\n\n1,2:", "3", messages)
    text = "<|im_start|>system\nadd<|im_end|>\n<|im_start|>user\n1,2:<|im_end|>\n<|im_start|>assistant\n"
    assert TOK.decode(CHAT.prompt_ids(example)) == text
    assert PLAIN.prompt_ids(example) == TOK.encode("add\n\n1,2:")  # no template, and this tokenizer has no BOS


def test_plain_format_puts_the_bos_of_a_tokenizer_that_has_one_first() -> None:
    char = build_char_tokenizer("0123456789,:")
    assert Renderer(char, "plain").prompt_ids(TaskExample("a", "s", "1,2:", "3")) == [char.bos_id, *char.encode("1,2:")]
    with pytest.raises(ValueError, match="expected a tokenizer with a chat template, got CharTokenizer"):
        Renderer(char, "chat")


CONVERSATIONS = st.tuples(TEXT, st.lists(st.tuples(TEXT, TEXT), max_size=4), TEXT)  # prompt, (turn, obs)*, turn


def _messages(prompt: str, rounds: list[tuple[str, str]], last: str) -> list[dict[str, str]]:
    out = [{"role": "user", "content": prompt}]
    for turn, observation in rounds:
        out += [{"role": "assistant", "content": turn}, {"role": "tool", "content": observation}]
    return [*out, {"role": "assistant", "content": last}]


@settings(max_examples=150, deadline=None)
@given(CONVERSATIONS)
def test_each_turn_s_ids_are_a_prefix_of_the_next_turn_s(conversation: tuple[str, list[tuple[str, str]], str]) -> None:
    """The routing rule needs each new context to extend the old one token for token: the ids of the conversation
    up to message k (with the generation prompt when an assistant turn comes next) start the ids up to k + 1."""
    messages = _messages(*conversation)
    for k in range(1, len(messages)):
        before = _ids(messages[:k], generation_prompt=messages[k]["role"] == "assistant")
        after = _ids(messages[: k + 1], generation_prompt=False)
        assert after[: len(before)] == before, k


@settings(max_examples=150, deadline=None)
@given(CONVERSATIONS)
def test_turn_by_turn_ids_equal_the_whole_rendered_conversation(
    conversation: tuple[str, list[tuple[str, str]], str],
) -> None:
    """What the warm-up trains on and the rollout builds turn by turn (prompt, each turn + EOS, each observation's
    ids) is the template's ids of the whole conversation, up to its last EOS."""
    prompt, rounds, last = conversation
    pieces = [p for turn, obs in rounds for p in (Piece(turn, True), Piece(obs, False))] + [Piece(last, True)]
    ids, mask = CHAT.demonstration(TaskExample("a", "s", prompt, ""), pieces)
    whole = _ids(_messages(*conversation), generation_prompt=False)
    assert whole[: len(ids)] == ids and TOK.decode(whole[len(ids) :]) == "\n"
    trained = [t for t, m in zip(ids[1:], mask, strict=True) if m]
    assert trained == [t for turn, _ in [*rounds, (last, "")] for t in (*TOK.encode(turn), TOK.eos_id)]


NO_SPECIALS = TEXT.filter(lambda t: "<|" not in t)  # a special token's literal in a turn is dropped, as EOS is


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(NO_SPECIALS, NO_SPECIALS), min_size=1, max_size=3), NO_SPECIALS, st.booleans())
def test_response_text_is_the_turns_and_observations_in_both_formats(
    rounds: list[tuple[str, str]], last: str, cut_first_turn: bool
) -> None:
    for renderer in (CHAT, PLAIN):
        episode = renderer.episode(TaskExample("a", "s", "p", ""))
        ids: list[int] = []
        mask: list[int] = []
        for k, (turn, observation) in enumerate(rounds):
            closed = not (cut_first_turn and k == 0)  # the engine's budget cut the first turn before EOS
            sampled = [*TOK.encode(turn), *([TOK.eos_id] if closed else [])]
            following = episode.next_turn(turn, closed=closed, observation=observation)
            ids, mask = ids + sampled + following, mask + [1] * len(sampled) + [0] * len(following)
        final = [*TOK.encode(last), TOK.eos_id]
        ids, mask = [*ids, *final], [*mask, *[1] * len(final)]
        assert renderer.response_text(ids, mask) == "".join(turn + obs for turn, obs in rounds) + last


def test_a_turn_cut_before_eos_gets_the_eos_from_the_template() -> None:
    calc = Renderer(CALC)
    episode = calc.episode(TaskExample("a", "s", "1,2:", "3"))
    following = episode.next_turn("1+2", closed=False, observation="=3;")
    assert CALC.decode(following) == "<|im_end|>\n<|im_start|>tool\n=3;<|im_end|>\n<|im_start|>assistant\n"
    assert len(following) == calc.observation_overhead() + len(CALC.encode("=3;"))
    assert Renderer(CALC, "plain").observation_overhead() == 0


def test_the_corpus_is_the_demonstrations_as_chats_and_the_format_does_not_change_the_tokenizer() -> None:
    first = next(tokenizer_corpus(TASK))
    example = TASK.splits.train[0]
    assert first.startswith(f"<|im_start|>user\n{example.prompt}<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>tool\n=" in first
    plain = dataclasses.replace(CalculatorTaskConfig(train_size=200, val_size=4), prompt_format="plain").build()
    assert isinstance(CALC, ChatTokenizer) and build_task_tokenizer(plain).vocab() == CALC.vocab()
