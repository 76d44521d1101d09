"""The calculator task: its tool, its exact reward, its expert demonstration and its seeded splits."""

from __future__ import annotations

import re

import pytest
from rl_tasks.calculator_env import CalculatorEnv, parse_prompt
from rl_tasks.calculator_reward import CalculatorReward, final_answer
from rl_tasks.calculator_task import CalculatorTaskConfig
from rl_tasks.example import TaskExample
from rl_tasks.task import Piece

SMALL = CalculatorTaskConfig(train_size=500, val_size=50, seed=3)
EX = TaskExample("u", "calculator", "12,34,56:", "102")


def test_a_well_formed_call_gets_its_sum_and_the_same_call_always_the_same_text() -> None:
    env = CalculatorEnv(max_turns=4)
    assert env.observation(EX, "12+34") == "=46;"
    assert env.observation(EX, "0+0") == "=0;"
    assert env.observation(EX, "007+5") == "=12;"
    assert env.observation(EX, "999999+1") == "=1000000;"
    assert [env.observation(EX, "46+56") for _ in range(3)] == ["=102;"] * 3


def test_observations_never_exceed_the_declared_bound_and_longer_operands_are_refused() -> None:
    env = CalculatorEnv(max_turns=2, max_operand_digits=3)
    longest = env.observation(EX, "999+999")
    assert longest == "=1998;" and len(longest) == env.max_observation_chars
    assert env.observation(EX, "1000+1") is None and env.observation(EX, "0001+1") is None
    task = CalculatorTaskConfig(min_terms=3, max_terms=3, max_digits=4).build()
    assert task.tool is not None and task.tool == CalculatorEnv(max_turns=4, max_operand_digits=5)
    assert task.tool.max_observation_chars == len("=199998;")


@pytest.mark.parametrize(
    "turn",
    [
        "#102",
        "",
        "12",
        "12+",
        "+34",
        "12+34+56",
        "12-34",
        " 12+34",
        "12+34 ",
        "12+34;",
        "1234567+1",
        "١٢+3",
        "12+<eos>",
    ],
)
def test_a_final_answer_or_a_malformed_call_ends_the_episode(turn: str) -> None:
    assert CalculatorEnv(max_turns=4).observation(EX, turn) is None


@pytest.mark.parametrize(
    ("response", "pred", "acc"),
    [
        ("12+34=46;46+56=102;#102", "102", 1.0),
        ("#102", "102", 1.0),  # answering without the tool is allowed: the reward checks the answer only
        ("12+34=46;46+56=102;#103", "103", 0.0),
        ("12+34=46;46+56=102;#0102", "0102", 0.0),  # exact digits: no leading zero
        ("12+34=46;46+56=102;# 102", None, 0.0),
        ("12+34=46;46+56=102;#102 ", None, 0.0),
        ("12+34=46;46+56=102;", None, 0.0),  # the episode ran out of turns after a call
        ("12+34=46;46+56", None, 0.0),  # a trailing call is no answer
        ("12+34=46;46+56#102", None, 0.0),  # a malformed turn that ended the episode
        ("#102#102", None, 0.0),
        ("#١٠٢", None, 0.0),  # ASCII digits only
        ("", None, 0.0),
    ],
)
def test_reward_is_exact_on_the_last_turn(response: str, pred: str | None, acc: float) -> None:
    result = CalculatorReward()(response, EX)
    assert (result.pred, result.acc, result.reward) == (pred, acc, acc)
    assert final_answer(response) == pred


def test_demonstration_calls_the_tool_left_to_right_and_answers_the_ground_truth() -> None:
    env = CalculatorEnv(max_turns=4)
    assert env.demonstration(EX) == (
        Piece("12+34", True),
        Piece("=46;", False),
        Piece("46+56", True),
        Piece("=102;", False),
        Piece("#102", True),
    )
    for ex in SMALL.build().splits.train[:100]:
        pieces = env.demonstration(ex)
        text = "".join(p.text for p in pieces)
        assert CalculatorReward()(text, ex).acc == 1.0
        for turn, observed in zip(pieces[0::2], pieces[1::2], strict=False):
            assert observed.text == env.observation(ex, turn.text)  # observations are the tool's own output


def test_prompt_parsing_refuses_what_is_not_a_calculator_prompt() -> None:
    assert parse_prompt("7,0,13:") == (7, 0, 13)
    for bad in ("7,0,13", "7,,13:", "7,a:", "sort:12="):
        with pytest.raises(ValueError, match="expected comma-separated digits ending in ':'"):
            parse_prompt(bad)


def test_splits_are_seeded_disjoint_and_within_the_configured_ranges() -> None:
    a, b = SMALL.build(), SMALL.build()
    assert a.splits == b.splits
    other = CalculatorTaskConfig(train_size=500, val_size=50, seed=4).build()
    assert [e.prompt for e in other.splits.validation] != [e.prompt for e in a.splits.validation]
    train, val = {e.prompt for e in a.splits.train}, {e.prompt for e in a.splits.validation}
    assert len(train) == 500 and len(val) == 50 and not train & val
    for ex in (*a.splits.train, *a.splits.validation):
        terms = parse_prompt(ex.prompt)
        assert SMALL.min_terms <= len(terms) <= SMALL.max_terms
        assert all(SMALL.min_digits <= len(str(t)) <= SMALL.max_digits for t in terms)
        assert ex.ground_truth == str(sum(terms)) and ex.data_source == "calculator"


def test_budget_and_turns_cover_every_expert_episode() -> None:
    cfg = CalculatorTaskConfig(min_terms=2, max_terms=4, min_digits=1, max_digits=3, train_size=3000, val_size=10)
    task = cfg.build()
    assert task.tool is not None and task.tool.max_turns == 4 + cfg.spare_turns
    longest = 0
    for ex in task.splits.train:
        turns = [p.text for p in task.demonstration(ex) if p.trainable]
        assert len(turns) <= task.tool.max_turns
        longest = max(longest, *map(len, turns))
    assert longest <= task.max_answer_chars == len("1998+999")
    assert longest >= task.max_answer_chars - 1  # the bound is tight, not padded


def test_config_refuses_ranges_the_tool_cannot_serve() -> None:
    with pytest.raises(ValueError, match=re.escape("expected 2 <= min_terms <= max_terms, got 1, 3")):
        CalculatorTaskConfig(min_terms=1, max_terms=3)
    with pytest.raises(ValueError, match="at most 6 digits"):
        CalculatorTaskConfig(max_digits=6)
    with pytest.raises(ValueError, match="kind: expected 'calculator', got 'toy'"):
        CalculatorTaskConfig(kind="toy")  # type: ignore[arg-type]
