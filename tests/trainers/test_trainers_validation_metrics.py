"""Validation metrics: final-output selection, exact key names, per-uid averaging and standard errors."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from trainers.validation_metrics import ValSample, select_final, val_ks, validation_metrics


def _samples(accs: dict[str, list[float]], ds: str = "math", with_pred: bool = True) -> list[ValSample]:
    return [
        ValSample(ds, uid, j, reward=2 * a, acc=a, pred=("right" if a else f"w{j % 2}") if with_pred else None)
        for uid, row in accs.items()
        for j, a in enumerate(row)
    ]


def test_ks_are_powers_of_two_below_n_then_n() -> None:
    assert val_ks(1) == [] and val_ks(2) == [2] and val_ks(5) == [2, 4, 5] and val_ks(8) == [2, 4, 8]


def test_core_and_aux_names_follow_the_reference_rule_exactly() -> None:
    out = validation_metrics(_samples({"u0": [1, 0, 0, 0], "u1": [1, 1, 0, 1]}))
    core = {k.removeprefix("val-core/math/") for k in out if k.startswith("val-core/")}
    assert core == {
        "acc/mean@4",
        "acc/best@4/mean",
        "acc/best@4/std",
        "acc/best@4/unbiased",
        "acc/maj@4/mean",
        "acc/maj@4/std",
        "acc/maj@4/unbiased",
    }
    aux = {k for k in out if k.startswith("val-aux/")}
    for name in (
        "val-aux/math/acc/std@4",
        "val-aux/math/acc/best@2/unbiased",
        "val-aux/math/acc/worst@4/unbiased",
        "val-aux/math/acc/pass@4",
        "val-aux/math/acc/sem/mean@4",
        "val-aux/math/reward/mean@4",
        "val-aux/math/reward/best@4/mean",
        "val-aux/num_turns/mean",
    ):
        assert name in aux
    assert "val-aux/math/reward/pass@4" not in out  # rewards 0/2 are not binary
    assert len(core) + len(aux) == len(out)


def test_values_are_unweighted_means_over_uids_of_the_per_uid_estimators() -> None:
    rows = {"u0": [1, 0, 0, 0], "u1": [1, 1, 0, 1], "u2": [0, 0, 0, 0]}
    out = validation_metrics(_samples(rows))
    assert out["val-core/math/acc/mean@4"] == pytest.approx(statistics.fmean([0.25, 0.75, 0.0]))
    for k in (2, 4):
        brute = []
        for row in rows.values():
            subs = list(itertools.combinations(row, k))
            brute.append(sum(max(s) for s in subs) / len(subs))
        assert out[f"val-aux/math/acc/pass@{k}"] == pytest.approx(statistics.fmean(brute))
        key = f"val-{'core' if k == 4 else 'aux'}/math/acc/best@{k}/unbiased"
        assert out[key] == pytest.approx(statistics.fmean(brute))
    std = statistics.fmean(statistics.pstdev(r) for r in rows.values())
    assert out["val-aux/math/acc/std@4"] == pytest.approx(std)
    sem = statistics.stdev([0.25, 0.75, 0.0]) / math.sqrt(3)
    assert out["val-aux/math/acc/sem/mean@4"] == pytest.approx(sem)
    for k in (2, 4):
        per_uid = []
        for uid, row in rows.items():
            preds = [s.pred for s in _samples({uid: row})]
            subs = list(itertools.combinations(range(4), k))
            per_uid.append(sum(_maj([row[i] for i in s], [preds[i] for i in s]) for s in subs) / len(subs))
        key = f"val-{'core' if k == 4 else 'aux'}/math/acc/maj@{k}/unbiased"
        assert out[key] == pytest.approx(statistics.fmean(per_uid))


def _maj(values: list[float], preds: list[str | None]) -> float:
    """Independent majority: most votes, ties to the earliest first occurrence, value of that first vote."""
    winner = min(set(preds), key=lambda p: (-preds.count(p), preds.index(p)))
    return float(values[preds.index(winner)])


def test_only_the_final_output_of_each_session_counts() -> None:
    samples = [
        ValSample("chat", "u", 0, reward=0.0, output_index=0, num_turns=1),
        ValSample("chat", "u", 0, reward=1.0, output_index=2, num_turns=3),
        ValSample("chat", "u", 0, reward=0.5, output_index=1, num_turns=2),
        ValSample("chat", "u", 1, reward=0.0, output_index=0, num_turns=1),
    ]
    assert [s.reward for s in select_final(samples)] == [1.0, 0.0]
    out = validation_metrics(samples)
    assert out["val-core/chat/reward/mean@2"] == 0.5  # reward is the core variable without acc
    assert out["val-aux/num_turns/max"] == 3.0 and out["val-aux/num_turns/min"] == 1.0
    assert "val-core/chat/reward/maj@2/mean" not in out  # no pred, no majority


def test_separate_data_sources_are_reported_separately() -> None:
    samples = _samples({"a": [1, 1]}, ds="x") + _samples({"b": [0, 0]}, ds="y")
    out = validation_metrics(samples)
    assert out["val-core/x/acc/mean@2"] == 1.0 and out["val-core/y/acc/mean@2"] == 0.0


def test_single_sample_prompts_give_mean_only() -> None:
    out = validation_metrics(_samples({"a": [1], "b": [0]}, with_pred=False))
    assert {k for k in out if "/acc/" in k} == {"val-core/math/acc/mean@1", "val-aux/math/acc/sem/mean@1"}


def test_inconsistent_inputs_raise_with_got_and_expected() -> None:
    with pytest.raises(ValueError, match="one number of final samples per uid"):
        validation_metrics(_samples({"a": [1, 0, 1], "b": [0, 1]}))
    with pytest.raises(ValueError, match="twice"):
        validation_metrics([ValSample("d", "u", 0, 1.0), ValSample("d", "u", 0, 0.0)])
    with pytest.raises(ValueError, match="acc on all samples or none"):
        validation_metrics([ValSample("d", "u", 0, 1.0, acc=1.0), ValSample("d", "u", 1, 0.0)])
    with pytest.raises(ValueError, match="in data sources"):
        validation_metrics([ValSample("d", "u", 0, 1.0), ValSample("e", "u", 1, 0.0)])
