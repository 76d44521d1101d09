"""Validation estimators against brute-force enumeration over all k-subsets."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainers import val_estimators
from trainers.val_estimators import (
    bootstrap_best_worst,
    bootstrap_majority,
    expected_best_of_k,
    expected_majority_of_k,
    expected_worst_of_k,
    majority_value,
    pass_at_k,
)


def _subsets(n: int, k: int) -> list[tuple[int, ...]]:
    return list(itertools.combinations(range(n), k))


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_comb_formula_and_subset_enumeration(n: int) -> None:
    for c in range(n + 1):
        values = [1.0] * c + [0.0] * (n - c)
        for k in range(1, n + 1):
            brute = sum(max(values[i] for i in s) for s in _subsets(n, k)) / math.comb(n, k)
            closed = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(closed, abs=1e-12)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)
            assert expected_best_of_k(values, k) == pytest.approx(brute, abs=1e-12)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, -1.0, 3.0]), min_size=1, max_size=8), st.data())
def test_exact_best_and_worst_of_k_equal_subset_enumeration_with_ties(values: list[float], data: st.DataObject) -> None:
    n = len(values)
    k = data.draw(st.integers(1, n))
    subsets = _subsets(n, k)
    best = sum(max(values[i] for i in s) for s in subsets) / len(subsets)
    worst = sum(min(values[i] for i in s) for s in subsets) / len(subsets)
    assert expected_best_of_k(values, k) == pytest.approx(best, abs=1e-9)
    assert expected_worst_of_k(values, k) == pytest.approx(worst, abs=1e-9)
    assert expected_best_of_k(values, 1) == pytest.approx(sum(values) / n)
    assert expected_best_of_k(values, n) == max(values) and expected_worst_of_k(values, n) == min(values)


def test_bootstrap_best_of_k_is_biased_low_as_documented() -> None:
    values = [1.0, 0.0, 0.0, 0.0]  # n = 4, c = 1
    for k, biased, unbiased in [(2, 0.4375, 0.5), (4, 1 - 0.75**4, 1.0)]:
        best_mean, best_std, worst_mean, _ = bootstrap_best_worst(values, k)
        assert best_mean == pytest.approx(biased, abs=0.04)
        assert best_std == pytest.approx(math.sqrt(biased * (1 - biased)), abs=0.04)
        assert pass_at_k(4, 1, k) == unbiased and best_mean < unbiased - 0.03
        assert worst_mean == pytest.approx(0.25**k, abs=0.03)  # biased high: the exact worst@k is 0
        assert expected_worst_of_k(values, k) == 0.0
    assert bootstrap_best_worst(values, 2) == bootstrap_best_worst(values, 2)  # re-seeded every call


def test_majority_tie_goes_to_the_earliest_first_occurrence_and_takes_its_first_value() -> None:
    assert majority_value([1.0, 0.0, 0.0, 1.0], ["a", "b", "b", "a"]) == 1.0
    assert majority_value([0.0, 1.0, 1.0, 0.0], ["b", "a", "a", "b"]) == 0.0
    assert majority_value([0.0, 1.0, 0.5], ["x", "y", "y"]) == 1.0  # y wins, first y's value
    assert majority_value([0.0, 0.0, 1.0], [None, None, "7"]) == 0.0  # no-answer is a vote like any other


def test_expected_majority_matches_hand_enumeration() -> None:
    # subsets of size 2 of (a,1) (a,1) (b,0): every subset elects a
    assert expected_majority_of_k([1.0, 1.0, 0.0], ["a", "a", "b"], 2) == 1.0
    # (b,0) (a,1) (a,1): {0,1} tie -> b, {0,2} tie -> b, {1,2} -> a
    assert expected_majority_of_k([0.0, 1.0, 1.0], ["b", "a", "a"], 2) == pytest.approx(1 / 3)
    assert expected_majority_of_k([0.0, 1.0, 1.0], ["b", "a", "a"], 3) == 1.0


def test_sampled_majority_estimate_is_close_to_the_exact_enumeration(monkeypatch: pytest.MonkeyPatch) -> None:
    preds = ["a", "b", "c", "a", "b", "a", "c", "c", "b", "a", "d", "a", "b", "c", "a", "b"]
    values = [1.0 if p == "a" else 0.0 for p in preds]
    exact = expected_majority_of_k(values, preds, 8)  # C(16, 8) = 12870 subsets, enumerated
    monkeypatch.setattr(val_estimators, "MAJ_MAX_SUBSETS", 4000)
    sampled = expected_majority_of_k(values, preds, 8)
    assert sampled == pytest.approx(exact, abs=0.03) and sampled != exact


def test_bootstrap_majority_matches_the_exact_expectation_over_ordered_draws() -> None:
    values, preds = [1.0, 0.0, 1.0], ["a", "b", "a"]
    draws = list(itertools.product(range(3), repeat=3))  # all 27 equally likely resamples of size 3
    maj = [majority_value([values[i] for i in d], [preds[i] for i in d]) for d in draws]
    exact_mean = sum(maj) / len(maj)
    exact_std = math.sqrt(sum((m - exact_mean) ** 2 for m in maj) / len(maj))
    mean, std = bootstrap_majority(values, preds, 3)
    assert mean == pytest.approx(exact_mean, abs=0.04) and std == pytest.approx(exact_std, abs=0.04)


def test_k_outside_one_to_n_raises() -> None:
    with pytest.raises(ValueError, match="1 <= k <= n"):
        expected_best_of_k([1.0, 2.0], 3)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)
