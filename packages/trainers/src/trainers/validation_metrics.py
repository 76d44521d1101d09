"""Validation metrics per data source, named `val-core/...` or `val-aux/...` (verl's naming, so dashboards carry over).

Input: one ValSample per output. Only the FINAL output (largest `output_index`) of each `(uid, repeat_index)`
session counts. Per (data source, uid, variable) with n final values the metrics are
- `mean@n`, `std@n` (population std, n > 1 only);
- for k in `[2, 4, 8, ...] (< n) + [n]` (none when n = 1):
  `best@k/{mean,std}`, `worst@k/{mean,std}` (verl's bootstrap, biased: see `val_estimators`),
  `best@k/unbiased`, `worst@k/unbiased` (exact expectation over k-subsets),
  `pass@k` (unbiased, only when every value is 0 or 1), and when any sample has a `pred`:
  `maj@k/{mean,std}` (bootstrap) and `maj@k/unbiased` (over k-subsets);
and per (data source, variable), across prompts: `sem/mean@n`, the standard error of the prompt means.
Each metric is the unweighted mean over the uids of its data source. Every uid of a data source must have the
same number n of final samples (else ValueError): unequal n would average different uid subsets per key (a
prompt whose sampling failed once would silently move into the `@n-1` metrics, biasing them); drop or re-run
incomplete prompts before calling. Variables are `reward` and,
when the samples carry it, `acc`; the core variable is `acc` if present, else `reward`.
A name is `val-core/{ds}/{var}/{metric}` iff var is the core variable, the metric starts with `mean`, `maj`
or `best`, and contains `@{n_max}` (the largest k among that variable's names); otherwise `val-aux/...`.
`val-aux/num_turns/{min,max,mean}` summarise the final outputs of all data sources.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from trainers.val_estimators import (
    bootstrap_best_worst,
    bootstrap_majority,
    expected_best_of_k,
    expected_majority_of_k,
    expected_worst_of_k,
    pass_at_k,
)

__all__ = ["ValSample", "select_final", "val_ks", "validation_metrics"]

_CORE_PREFIXES = ("mean", "maj", "best")
_AT = re.compile(r"@(\d+)")


@dataclass(frozen=True)
class ValSample:
    """One validation output. `repeat_index` is j in 0..n-1; `output_index` orders a multi-turn session."""

    data_source: str
    uid: str
    repeat_index: int
    reward: float
    acc: float | None = None
    pred: str | None = None
    output_index: int = 0
    num_turns: int = 1


def val_ks(n: int) -> list[int]:
    """`[2, 4, 8, ...]` below n, then n; empty for n <= 1."""
    if n <= 1:
        return []
    ks, k = [], 2
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def select_final(samples: Sequence[ValSample]) -> list[ValSample]:
    """The output with the largest `output_index` per `(uid, repeat_index)`, in order of first appearance."""
    final: dict[tuple[str, int], ValSample] = {}
    seen: set[tuple[str, int, int]] = set()
    source: dict[str, str] = {}
    for s in samples:
        key = (s.uid, s.repeat_index, s.output_index)
        if key in seen:
            raise ValueError(f"select_final: expected one sample per (uid, repeat, output), got {key} twice")
        seen.add(key)
        if source.setdefault(s.uid, s.data_source) != s.data_source:
            raise ValueError(f"select_final: uid {s.uid!r} in data sources {source[s.uid]!r} and {s.data_source!r}")
        cur = final.get((s.uid, s.repeat_index))
        if cur is None or s.output_index > cur.output_index:
            final[(s.uid, s.repeat_index)] = s
    return list(final.values())


def _uid_metrics(values: list[float], preds: list[str | None] | None) -> dict[str, float]:
    n = len(values)
    out = {f"mean@{n}": statistics.fmean(values)}
    if n > 1:
        out[f"std@{n}"] = statistics.pstdev(values)
    binary = all(v in (0.0, 1.0) for v in values)
    for k in val_ks(n):
        b_mean, b_std, w_mean, w_std = bootstrap_best_worst(values, k)
        out |= {f"best@{k}/mean": b_mean, f"best@{k}/std": b_std, f"worst@{k}/mean": w_mean, f"worst@{k}/std": w_std}
        out[f"best@{k}/unbiased"] = expected_best_of_k(values, k)
        out[f"worst@{k}/unbiased"] = expected_worst_of_k(values, k)
        if binary:
            out[f"pass@{k}"] = pass_at_k(n, int(sum(values)), k)
        if preds is not None:
            m_mean, m_std = bootstrap_majority(values, preds, k)
            out |= {f"maj@{k}/mean": m_mean, f"maj@{k}/std": m_std}
            out[f"maj@{k}/unbiased"] = expected_majority_of_k(values, preds, k)
    return out


def _variables(ds: str, samples: list[ValSample]) -> list[str]:
    with_acc = sum(s.acc is not None for s in samples)
    if 0 < with_acc < len(samples):
        raise ValueError(f"data source {ds!r}: expected acc on all samples or none, got {with_acc}/{len(samples)}")
    return ["acc", "reward"] if with_acc else ["reward"]


def _source_metrics(ds: str, samples: list[ValSample]) -> dict[str, float]:
    by_uid: dict[str, list[ValSample]] = {}
    for s in sorted(samples, key=lambda s: s.repeat_index):
        by_uid.setdefault(s.uid, []).append(s)
    sizes = {len(g) for g in by_uid.values()}
    if len(sizes) != 1:
        raise ValueError(f"data source {ds!r}: expected one number of final samples per uid, got {sorted(sizes)}")
    (n,) = sizes
    variables = _variables(ds, samples)
    core_var = variables[0]
    has_pred = any(s.pred is not None for s in samples)
    out: dict[str, float] = {}
    for var in variables:
        per_uid = []
        for group in by_uid.values():
            values = [float(s.acc if var == "acc" else s.reward) for s in group]  # type: ignore[arg-type]
            per_uid.append(_uid_metrics(values, [s.pred for s in group] if has_pred else None))
        agg = {name: statistics.fmean(m[name] for m in per_uid) for name in per_uid[0]}
        if len(per_uid) > 1:
            means = [m[f"mean@{n}"] for m in per_uid]
            agg[f"sem/mean@{n}"] = statistics.stdev(means) / len(means) ** 0.5
        n_max = max(int(x) for name in agg for x in _AT.findall(name))
        for name in sorted(agg):
            core = var == core_var and name.startswith(_CORE_PREFIXES) and f"@{n_max}" in name
            out[f"{'val-core' if core else 'val-aux'}/{ds}/{var}/{name}"] = agg[name]
    return out


def validation_metrics(samples: Sequence[ValSample]) -> dict[str, float]:
    """All validation metrics of one evaluation (see the module docstring)."""
    final = select_final(samples)
    if not final:
        raise ValueError("validation_metrics: expected at least one sample, got none")
    by_source: dict[str, list[ValSample]] = {}
    for s in final:
        by_source.setdefault(s.data_source, []).append(s)
    out: dict[str, float] = {}
    for ds, group in by_source.items():
        out |= _source_metrics(ds, group)
    turns = [s.num_turns for s in final]
    out |= {
        "val-aux/num_turns/min": float(min(turns)),
        "val-aux/num_turns/max": float(max(turns)),
        "val-aux/num_turns/mean": statistics.fmean(turns),
    }
    return out
