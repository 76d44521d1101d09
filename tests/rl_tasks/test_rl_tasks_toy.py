"""The toy task: answers are correct, splits are seeded and disjoint, response lengths vary."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_tasks.addition import AdditionSource
from rl_tasks.example import TaskExample
from rl_tasks.reward import ScoreStatus, score_safely
from rl_tasks.sorting import SortSource
from rl_tasks.task import Piece
from rl_tasks.toy_task import ToyTaskConfig, build_splits, toy_reward_fn

SMALL = ToyTaskConfig(train_size=2000, val_size=200, seed=3)


def test_same_seed_gives_identical_splits_and_another_seed_differs() -> None:
    a, b = build_splits(SMALL), build_splits(SMALL)
    assert a == b
    c = build_splits(ToyTaskConfig(train_size=2000, val_size=200, seed=4))
    assert [e.prompt for e in c.validation] != [e.prompt for e in a.validation]


def test_validation_prompts_never_appear_in_train_and_uids_are_unique() -> None:
    splits = build_splits(SMALL)
    train = {e.prompt for e in splits.train}
    assert len(train) == 2000 and len({e.prompt for e in splits.validation}) == 200
    assert not train & {e.prompt for e in splits.validation}
    uids = [e.uid for e in (*splits.train, *splits.validation)]
    assert len(set(uids)) == len(uids)


def test_ground_truths_are_correct_for_both_sources() -> None:
    for ex in build_splits(SMALL).train:
        if ex.data_source == "addition":
            a, b = ex.prompt.removesuffix("=").split("+")
            assert int(ex.ground_truth) == int(a) + int(b)
            assert 1 <= len(a) <= 3 and 1 <= len(b) <= 3
        else:
            digits = ex.prompt.removeprefix("sort:").removesuffix("=")
            assert ex.ground_truth == "".join(sorted(digits)) and 2 <= len(digits) <= 12


def test_mixture_has_both_sources_and_a_long_tail_of_answer_lengths() -> None:
    splits = build_splits(SMALL)
    sources = [e.data_source for e in splits.train]
    assert 0.4 < sources.count("addition") / len(sources) < 0.6
    lengths = np.array([len(e.ground_truth) for e in splits.train])
    assert lengths.min() == 1 and lengths.max() == 12
    assert np.mean(lengths >= 8) > 0.15  # a tail that an async pipeline has to wait for


def test_alphabet_covers_every_prompt_and_answer_char() -> None:
    cfg = SMALL
    splits = build_splits(cfg)
    used = {c for e in splits.train for c in e.prompt + e.ground_truth}
    assert used == set(cfg.alphabet)
    assert set(ToyTaskConfig(sort_weight=0).alphabet) == set("0123456789+=")


def test_too_small_prompt_space_raises_instead_of_looping() -> None:
    tiny = ToyTaskConfig(sort_weight=0, addition=AdditionSource(1, 1), train_size=200, val_size=10)
    with pytest.raises(ValueError, match="unique train prompts"):
        build_splits(tiny)


def test_fingerprint_changes_with_any_field() -> None:
    base = ToyTaskConfig()
    assert base.fingerprint() == ToyTaskConfig().fingerprint()
    assert base.fingerprint() != ToyTaskConfig(sort=SortSource(2, 11)).fingerprint()
    assert base.fingerprint() != ToyTaskConfig(seed=1).fingerprint()


@settings(max_examples=50, deadline=None)
@given(a=st.integers(0, 999), b=st.integers(0, 999), noise=st.sampled_from(["", " ", "\n"]))
def test_exact_match_reward_accepts_only_the_sum(a: int, b: int, noise: str) -> None:
    ex = TaskExample("u", "addition", f"{a}+{b}=", str(a + b))
    fn = toy_reward_fn(ToyTaskConfig())
    assert fn(noise + str(a + b) + noise, ex).acc == 1.0
    wrong = fn(str(a + b + 1), ex)
    assert (wrong.reward, wrong.acc, wrong.pred) == (0.0, 0.0, str(a + b + 1))
    assert fn("", ex).pred is None


def test_unknown_data_source_is_an_error_record_not_a_zero() -> None:
    fn = toy_reward_fn(ToyTaskConfig(sort_weight=0))
    scored = score_safely(fn, "123", TaskExample("u", "sort", "sort:321=", "123"))
    assert scored.status is ScoreStatus.ERROR and scored.result is None
    assert "no reward function for data_source 'sort'" in (scored.error or "")


def test_built_task_is_the_single_turn_view_of_the_config() -> None:
    task = SMALL.build()
    assert task.kind == SMALL.kind == "toy" and task.tool is None
    assert task.splits == build_splits(SMALL)
    assert (task.alphabet, task.max_answer_chars) == (SMALL.alphabet, SMALL.max_answer_chars)
    ex = task.splits.validation[0]
    assert task.demonstration(ex) == (Piece(ex.ground_truth, trainable=True),)
    assert task.reward_fn == toy_reward_fn(SMALL)
    assert task.fingerprint() != ToyTaskConfig(train_size=2000, val_size=200, seed=4).build().fingerprint()
    with pytest.raises(ValueError, match="kind: expected 'toy', got 'dataset'"):
        ToyTaskConfig(kind="dataset")  # type: ignore[arg-type]
