"""The scratchpad task: a selection-sort trace whose rows follow one local rule, a long tail of lengths, a reward
on the final answer only, seeded disjoint splits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_tasks.example import TaskExample
from rl_tasks.scratchpad_task import ScratchpadTaskConfig, trace_demonstration
from rl_tasks.sort_trace import FinalAnswerReward, SortTraceSource, prompt_digits, sort_trace, trace_length

SMALL = ScratchpadTaskConfig(train_size=2000, val_size=200, seed=3)


def test_sort_trace_of_a_known_input() -> None:
    assert sort_trace("3141") == "1:341;11:34;113:4;1134:>1134"
    assert sort_trace("7") == "7:>7"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789", min_size=1, max_size=20))
def test_every_trace_row_takes_the_smallest_remaining_digit_and_ends_with_the_sorted_answer(digits: str) -> None:
    trace = sort_trace(digits)
    body, answer = trace.split(">")
    assert answer == "".join(sorted(digits)) and len(trace) == trace_length(len(digits))
    rest_before, taken_before = digits, ""
    for row in body.split(";"):
        taken, rest = row.split(":")
        assert len(row) == len(digits) + 1  # constant row width: each character copies one n + 2 places back
        smallest = min(rest_before)
        assert taken == taken_before + smallest
        cut = rest_before.index(smallest)
        assert rest == rest_before[:cut] + rest_before[cut + 1 :]
        rest_before, taken_before = rest, taken
    assert rest_before == ""


def test_sort_trace_rejects_non_digit_input() -> None:
    for bad in ("", "12a", "١٢"):
        with pytest.raises(ValueError, match="digits"):
            sort_trace(bad)


def test_lengths_have_a_long_tail_short_inputs_most_frequent() -> None:
    src = SortTraceSource(min_len=2, max_len=16, length_decay=0.8)
    rng = np.random.default_rng(0)
    lengths = np.array([len(src.sample(rng)[1]) for _ in range(20_000)])
    probs = src.length_probs
    assert abs(probs.sum() - 1) < 1e-12 and np.all(np.diff(probs) < 0)
    counts = np.bincount(lengths, minlength=17)[2:]
    assert np.abs(counts / counts.sum() - probs).max() < 0.01  # the draws follow the stated weights
    traces = np.array([trace_length(int(n)) for n in lengths])
    assert traces.min() == 10 and traces.max() == 304
    assert np.median(traces) < traces.mean() < 0.25 * traces.max()  # right-skewed: most short, a few long


def test_uniform_lengths_at_decay_one() -> None:
    assert np.allclose(SortTraceSource(min_len=3, max_len=6, length_decay=1.0).length_probs, 0.25)


def test_bad_source_settings_fail_with_got_and_expected() -> None:
    with pytest.raises(ValueError, match="min_len"):
        SortTraceSource(min_len=5, max_len=4)
    with pytest.raises(ValueError, match=r"length_decay.*\(0, 1\].*got 0.0"):
        SortTraceSource(length_decay=0.0)
    with pytest.raises(ValueError, match="val_size"):
        ScratchpadTaskConfig(val_size=0)


def test_final_answer_reward_scores_only_the_text_after_the_last_marker() -> None:
    ex = TaskExample("u", "sort_trace", "sort:3141=", "1134")
    reward = FinalAnswerReward()
    assert reward(sort_trace("3141"), ex).reward == 1.0
    wrong_trace = "9:999;" + sort_trace("3141")  # a wrong trace with the right answer still earns the reward
    assert reward(wrong_trace, ex).acc == 1.0
    assert reward("1:341;11:34;113:4;1134:>1143", ex).reward == 0.0
    no_answer = reward("1:341;11:34", ex)
    assert no_answer.reward == 0.0 and no_answer.pred is None


def test_splits_are_seeded_disjoint_and_the_demonstration_is_the_trace() -> None:
    task, again = SMALL.build(), SMALL.build()
    assert task.splits == again.splits and task.fingerprint() == again.fingerprint()
    train = {e.prompt for e in task.splits.train}
    assert not train & {e.prompt for e in task.splits.validation}
    ex = task.splits.train[0]
    (piece,) = trace_demonstration(ex)
    assert piece.trainable and piece.text == sort_trace(prompt_digits(ex.prompt))
    assert task.reward_fn(piece.text, ex).reward == 1.0
    assert task.max_answer_chars == trace_length(SMALL.sort.max_len)
    assert set(piece.text) <= set(task.alphabet)
