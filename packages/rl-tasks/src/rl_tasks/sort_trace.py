"""Digit sorting with a scratchpad: a selection-sort trace, then the answer.

`"sort:3141="` -> `"1:341;11:34;113:4;1134:>1134"`. Row k (k = 1..n) is the k smallest digits in order, `:`, and
the digits not yet taken in their input order (the first occurrence of the smallest one removed); rows are joined
by `;`, and the answer follows `>`. Every row is `n + 1` characters, so each character of a row sits exactly
`n + 2` positions after the one it copies or replaces in the row before: the trace is a local rule a small
transformer can follow, and its length, `n * (n + 3)` characters, grows with the square of the input's.

The input length `n` is drawn from `[min_len, max_len]` with weights `length_decay ** (n - min_len)`, so most
prompts are short and a few are long: response lengths have a long tail (from 10 characters at n = 2 to 304 at
n = 16), as reasoning traces of a real policy do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardResult

SORT_TRACE_SOURCE = "sort_trace"
SORT_TRACE_PREFIX = "sort:"
ROW_SEP, PART_SEP, ANSWER_MARK = ";", ":", ">"


def sort_trace(digits: str) -> str:
    """The demonstration for `digits` (non-empty, `0-9` only): the rows and `>` + the sorted digits."""
    if not digits or not digits.isdigit() or not digits.isascii():
        raise ValueError(f"sort_trace: expected a non-empty string of digits 0-9, got {digits!r}")
    taken, rest, rows = "", digits, []
    while rest:
        smallest = min(rest)
        cut = rest.index(smallest)
        taken, rest = taken + smallest, rest[:cut] + rest[cut + 1 :]
        rows.append(f"{taken}{PART_SEP}{rest}")
    return ROW_SEP.join(rows) + ANSWER_MARK + taken


def trace_length(n: int) -> int:
    """Characters of `sort_trace` for an input of `n` digits: n rows of n + 1, n - 1 separators, `>` and n."""
    return n * (n + 3)


@dataclass(frozen=True)
class SortTraceSource:
    """Input length `n` in `[min_len, max_len]` with probability proportional to `length_decay ** (n - min_len)`
    (1.0: uniform), each digit uniform in 0-9."""

    min_len: int = field(default=2, metadata={"help": "fewest digits to sort"})
    max_len: int = field(default=16, metadata={"help": "most digits to sort (the trace has n * (n + 3) characters)"})
    length_decay: float = field(
        default=0.8, metadata={"help": "weight ratio of length n + 1 to length n (below 1: a long tail of lengths)"}
    )
    name: str = field(default=SORT_TRACE_SOURCE, metadata={"help": "data source name (metrics and dumps)"})

    def __post_init__(self) -> None:
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(
                f"SortTraceSource: expected 1 <= min_len <= max_len, got min_len={self.min_len}, max_len={self.max_len}"
            )
        if not 0.0 < self.length_decay <= 1.0:
            raise ValueError(f"SortTraceSource.length_decay: expected a value in (0, 1], got {self.length_decay}")

    @property
    def alphabet(self) -> str:
        return "".join(sorted(set("0123456789=" + SORT_TRACE_PREFIX + ROW_SEP + PART_SEP + ANSWER_MARK)))

    @property
    def length_probs(self) -> np.ndarray:
        """P(n) for n = min_len..max_len (sums to 1)."""
        w = self.length_decay ** np.arange(self.max_len - self.min_len + 1, dtype=np.float64)
        return w / w.sum()

    @property
    def max_answer_chars(self) -> int:
        return trace_length(self.max_len)

    def sample(self, rng: np.random.Generator) -> tuple[str, str]:
        """One `(prompt, answer)` pair; the answer is the sorted digits (the trace is the demonstration)."""
        n = self.min_len + int(rng.choice(len(self.length_probs), p=self.length_probs))
        digits = "".join(str(int(d)) for d in rng.integers(0, 10, size=n))
        return f"{SORT_TRACE_PREFIX}{digits}=", "".join(sorted(digits))


def prompt_digits(prompt: str) -> str:
    """The digits of a `sort:<digits>=` prompt."""
    if not (prompt.startswith(SORT_TRACE_PREFIX) and prompt.endswith("=")):
        raise ValueError(f"prompt_digits: expected 'sort:<digits>=', got {prompt!r}")
    return prompt[len(SORT_TRACE_PREFIX) : -1]


@dataclass(frozen=True)
class FinalAnswerReward:
    """Reward `correct` when the text after the response's last `>` equals the ground truth, else `incorrect`.
    The trace before it is not scored: only the final answer counts. `pred` is that text (None without `>`)."""

    correct: float = 1.0
    incorrect: float = 0.0

    def __call__(self, response_text: str, example: TaskExample) -> RewardResult:
        if not isinstance(response_text, str):
            raise ValueError(f"FinalAnswerReward: expected response_text str, got {type(response_text).__name__}")
        if ANSWER_MARK not in response_text:
            return RewardResult(reward=self.incorrect, acc=0.0, pred=None)
        pred = response_text.rsplit(ANSWER_MARK, 1)[1].strip()
        hit = pred == example.ground_truth
        return RewardResult(reward=self.correct if hit else self.incorrect, acc=1.0 if hit else 0.0, pred=pred or None)
