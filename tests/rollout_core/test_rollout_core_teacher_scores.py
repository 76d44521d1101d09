"""TeacherScores checks its shapes, its temperature and its sampled slot at construction."""

from __future__ import annotations

import numpy as np
import pytest
from rollout_core.teacher_scores import TeacherScores


def _scores(r: int = 3, k: int = 2, **changes: object) -> TeacherScores:
    fields: dict[str, object] = {
        "sampled": np.full(r, -1.0, dtype=np.float32),
        "ids": np.zeros((r, k), dtype=np.int64),
        "logprobs": np.full((r, k), np.log(0.25), dtype=np.float32),
        "valid": np.ones((r, k), dtype=bool),
        "in_top_k": np.zeros(r, dtype=bool),
        "temperature": 1.0,
    }
    return TeacherScores(**{**fields, **changes})  # type: ignore[arg-type]


def test_top_k_mass_sums_only_valid_entries() -> None:
    valid = np.array([[True, True], [True, False], [False, False]])
    assert _scores(valid=valid).top_k_mass.tolist() == pytest.approx([0.5, 0.25, 0.0])


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"ids": np.zeros((2, 2), dtype=np.int64)}, r"ids: expected shape \[3, K\]"),
        ({"logprobs": np.zeros((3, 1), dtype=np.float32)}, "logprobs: expected shape"),
        ({"in_top_k": np.zeros(2, dtype=bool)}, "in_top_k: expected shape"),
        ({"temperature": 0.0}, "temperature: expected > 0"),
        ({"sampled": np.array([0.0, np.nan, -1.0], dtype=np.float32)}, "expected finite log-probs"),
    ],
)
def test_inconsistent_scores_are_refused(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _scores(**changes)
