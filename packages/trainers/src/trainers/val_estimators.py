"""Best-of-k, worst-of-k, majority-of-k and pass@k estimators over the n scores of one prompt.

Two families, side by side:
- `bootstrap_*` reproduce verl's `bootstrap_metric`: 1000 resamples of size k drawn WITH replacement from a
  generator re-seeded (seed 42) on every call. Duplicated draws waste samples, so best@k is biased LOW
  (for binary scores with c of n correct its expectation is `1 - (1 - c/n)^k`, below pass@k; at k = n it
  never reaches the observed max) and worst@k is biased high.
- `expected_*` are exact expectations over the `C(n, k)` subsets of size k drawn WITHOUT replacement: the
  unbiased estimators of the population best/worst/majority-of-k. For binary scores `expected_best_of_k`
  equals the unbiased pass@k.

Majority tie rule: among the predictions with the largest count in a subset, the one whose first occurrence
comes earliest (in subset order: sample order for subsets, draw order for resamples) wins; the value is that
of the FIRST element carrying the winning prediction. `None` is a prediction like any other (no answer).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "MAJ_MAX_SUBSETS",
    "bootstrap_best_worst",
    "bootstrap_majority",
    "expected_best_of_k",
    "expected_majority_of_k",
    "expected_worst_of_k",
    "majority_value",
    "pass_at_k",
]

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 42
MAJ_MAX_SUBSETS = 20000  # beyond this many k-subsets, expected_majority_of_k samples this many (seeded)


def _check_k(n: int, k: int) -> None:
    if not (1 <= k <= n):
        raise ValueError(f"k: expected 1 <= k <= n = {n}, got {k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k `1 - C(n-c, k)/C(n, k)` as `1 - Π_{i=n-c+1}^{n} (1 - k/i)` (1.0 when n - c < k)."""
    _check_k(n, k)
    if not (0 <= c <= n):
        raise ValueError(f"pass_at_k: expected 0 <= c <= n = {n}, got c = {c}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def expected_best_of_k(values: Sequence[float], k: int) -> float:
    """`E[max of a uniform k-subset] = Σ_{i=k}^{n} C(i-1, k-1)/C(n, k)·v_(i)` (v sorted ascending, 1-based)."""
    n = len(values)
    _check_k(n, k)
    v = sorted(values)
    total = math.comb(n, k)
    return sum(math.comb(i - 1, k - 1) * v[i - 1] for i in range(k, n + 1)) / total


def expected_worst_of_k(values: Sequence[float], k: int) -> float:
    """`E[min of a uniform k-subset] = Σ_{i=1}^{n-k+1} C(n-i, k-1)/C(n, k)·v_(i)` (v sorted ascending)."""
    n = len(values)
    _check_k(n, k)
    v = sorted(values)
    total = math.comb(n, k)
    return sum(math.comb(n - i, k - 1) * v[i - 1] for i in range(1, n - k + 2)) / total


def majority_value(values: Sequence[float], preds: Sequence[str | None]) -> float:
    """The value of the first element whose prediction wins the vote (tie rule in the module docstring)."""
    if len(values) != len(preds) or not values:
        raise ValueError(f"majority_value: expected equal non-empty lengths, got {len(values)} and {len(preds)}")
    counts: dict[str | None, int] = {}
    first: dict[str | None, int] = {}
    for i, p in enumerate(preds):
        counts[p] = counts.get(p, 0) + 1
        first.setdefault(p, i)
    winner = max(counts, key=lambda p: (counts[p], -first[p]))
    return float(values[first[winner]])


def expected_majority_of_k(values: Sequence[float], preds: Sequence[str | None], k: int) -> float:
    """Mean of `majority_value` over every k-subset (in sample order); beyond MAJ_MAX_SUBSETS subsets, over
    MAJ_MAX_SUBSETS uniformly drawn ones (seeded), an unbiased estimate of the same expectation."""
    n = len(values)
    _check_k(n, k)
    if math.comb(n, k) <= MAJ_MAX_SUBSETS:
        subsets: list[Sequence[int]] = list(itertools.combinations(range(n), k))
    else:
        rng = np.random.default_rng(BOOTSTRAP_SEED)
        subsets = [sorted(rng.choice(n, size=k, replace=False).tolist()) for _ in range(MAJ_MAX_SUBSETS)]
    total = sum(majority_value([values[i] for i in s], [preds[i] for i in s]) for s in subsets)
    return total / len(subsets)


def _resample_indices(n: int, k: int) -> np.ndarray:  # [BOOTSTRAP_RESAMPLES, k]
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    return rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, k))


def bootstrap_best_worst(values: Sequence[float], k: int) -> tuple[float, float, float, float]:
    """`(best mean, best std, worst mean, worst std)` of resample max/min over the bootstrap (population std)."""
    _check_k(len(values), k)
    draws = np.asarray(values, dtype=np.float64)[_resample_indices(len(values), k)]  # [R, k]
    best, worst = draws.max(axis=1), draws.min(axis=1)
    return float(best.mean()), float(best.std()), float(worst.mean()), float(worst.std())


def bootstrap_majority(values: Sequence[float], preds: Sequence[str | None], k: int) -> tuple[float, float]:
    """`(mean, std)` of the resample majority value over the bootstrap (draw order breaks ties)."""
    _check_k(len(values), k)
    idx = _resample_indices(len(values), k)
    maj = np.array([majority_value([values[i] for i in row], [preds[i] for i in row]) for row in idx.tolist()])
    return float(maj.mean()), float(maj.std())
