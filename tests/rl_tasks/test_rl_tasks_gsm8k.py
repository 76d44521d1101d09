"""GSM8K final-answer extraction and numeric normalisation on hand-written cases."""

from __future__ import annotations

import pytest
from rl_tasks.example import TaskExample
from rl_tasks.gsm8k import Gsm8kReward, extract_final_answer, normalize_number
from rl_tasks.reward import ScoreStatus, score_safely


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("42", "42"),
        ("1,000", "1000"),
        ("$1,234.50", "1234.5"),
        ("7.0", "7"),
        ("7.00", "7"),
        ("18.", "18"),
        ("-3", "-3"),
        ("-0", "0"),
        ("0.50", "0.5"),
        (".5", "0.5"),
        ("$ 12", "12"),
        ("abc", None),
        ("", None),
        ("1.2.3", None),
        ("12a", None),
    ],
)
def test_normalize_number(raw: str, expected: str | None) -> None:
    assert normalize_number(raw) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She pays 3*4=12 dollars.\n#### 12", "12"),
        ("first 5 then 7\n#### 1,200\nextra 99", "1200"),
        ("The answer is \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{\\$2,000.00}", "2000"),
        ("\\boxed{\\frac{3}{4}} hmm 9", "3"),
        ("So she has 5 apples and 18 pears, total 23.", "23"),
        ("Total: $1,250.", "1250"),
        ("#### 7 and boxed \\boxed{8}", "7"),
        ("no numbers here", None),
        ("#### \n and 5 later", "5"),
        ("\\boxed{unclosed 4", "4"),
    ],
)
def test_extract_final_answer_flexible(text: str, expected: str | None) -> None:
    assert extract_final_answer(text) == expected


def test_strict_mode_ignores_loose_numbers() -> None:
    assert extract_final_answer("The total is 23.", strict=True) is None
    assert extract_final_answer("so \\boxed{23}", strict=True) == "23"
    assert extract_final_answer("so #### 23", strict=True) == "23"


def test_reward_compares_numbers_after_normalisation_and_accepts_solution_ground_truth() -> None:
    ex = TaskExample("g1", "openai/gsm8k", "q", "Natalia sold 48/2 = 24 clips.\n#### 1,072")
    fn = Gsm8kReward()
    hit = fn("... so the answer is \\boxed{1072.0}", ex)
    assert (hit.reward, hit.acc, hit.pred) == (1.0, 1.0, "1072")
    miss = fn("#### 1071", ex)
    assert (miss.reward, miss.acc, miss.pred) == (0.0, 0.0, "1071")
    none = fn("I do not know", ex)
    assert (none.acc, none.pred) == (0.0, None)


def test_ground_truth_without_number_is_an_error_not_a_zero() -> None:
    scored = score_safely(Gsm8kReward(), "#### 3", TaskExample("g2", "openai/gsm8k", "q", "unknown"))
    assert scored.status is ScoreStatus.ERROR and "holds no number" in (scored.error or "")
