"""GSM8K-style final-answer extraction and a numeric-equality reward.

Extraction order: the last `#### <answer>`, else the last `\\boxed{<answer>}`, else (unless strict) the last
number in the text. Numbers compare after normalisation: `$`, commas and spaces removed, a sentence-final
period dropped, and the value printed canonically (`1,000.0` -> `1000`, `0.50` -> `0.5`, `-0` -> `0`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardResult

_NUMBER = re.compile(r"-?\$?\s?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")
_HASHES = "####"
_BOXED = "\\boxed{"


def normalize_number(text: str) -> str | None:
    """Canonical decimal string of a number written with optional `$`, commas and a trailing period;
    None if `text` is not a single number."""
    cleaned = text.strip().replace("$", "").replace(",", "").replace(" ", "")
    cleaned = cleaned.rstrip(".")
    if not cleaned or not re.fullmatch(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)", cleaned):
        return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _last_number(text: str) -> str | None:
    matches = _NUMBER.findall(text)
    for raw in reversed(matches):
        norm = normalize_number(raw)
        if norm is not None:
            return norm
    return None


def _first_number(text: str) -> str | None:
    for raw in _NUMBER.findall(text):
        norm = normalize_number(raw)
        if norm is not None:
            return norm
    return None


def _last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` with balanced braces; None if absent or unclosed."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def extract_final_answer(text: str, *, strict: bool = False) -> str | None:
    """The normalised final answer of a solution, or None when none is found (see module doc for order)."""
    if _HASHES in text:
        tail = text[text.rfind(_HASHES) + len(_HASHES) :].strip().splitlines()
        found = _first_number(tail[0]) if tail else None
        if found is not None:
            return found
    boxed = _last_boxed(text)
    if boxed is not None:
        found = _first_number(boxed)
        if found is not None:
            return found
    return None if strict else _last_number(text)


@dataclass(frozen=True)
class Gsm8kReward:
    """`correct` when the extracted answer equals the normalised ground truth, else `incorrect`.

    The ground truth may be a bare number or a full GSM8K solution ending in `#### n`; one that holds no
    number raises ValueError (a dataset defect, reported as an error record, never scored 0).
    """

    strict: bool = False
    correct: float = 1.0
    incorrect: float = 0.0

    def __call__(self, response_text: str, example: TaskExample) -> RewardResult:
        truth = extract_final_answer(example.ground_truth, strict=False)
        if truth is None:
            raise ValueError(
                f"Gsm8kReward: ground truth of {example.uid!r} holds no number, got {example.ground_truth!r}"
            )
        pred = extract_final_answer(response_text, strict=self.strict)
        hit = pred is not None and pred == truth
        return RewardResult(reward=self.correct if hit else self.incorrect, acc=1.0 if hit else 0.0, pred=pred)
