"""Per-step quality metrics of the responses a step trained on (never of pads)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from trainers.rollout.samples import SampleStatus, ScoredSample


def rollout_metrics(scored: Sequence[ScoredSample], num_padding: int) -> dict[str, float]:
    """`reward/*` and `rollout/*` over the step's ok samples; dropped and failed ones are counted."""
    ok = [s for s in scored if s.status is SampleStatus.OK]
    lengths = [len(s.trajectory.response_ids) for s in ok]
    if not ok:
        raise ValueError(f"rollout_metrics: expected at least one ok sample among {len(scored)}, got none")
    return {
        "reward/mean": statistics.fmean(s.reward for s in ok),
        "reward/acc": statistics.fmean(s.acc for s in ok),
        "reward/num_error": float(sum(s.status is SampleStatus.REWARD_ERROR for s in scored)),
        "rollout/num_dropped": float(sum(s.status is SampleStatus.NOT_OK for s in scored)),
        "rollout/num_samples": float(len(ok)),
        "rollout/num_padding": float(num_padding),
        "rollout/response_length_mean": statistics.fmean(lengths),
        "rollout/response_length_max": float(max(lengths)),
        "rollout/num_turns_mean": statistics.fmean(max(s.trajectory.num_turns, 1) for s in ok),
        "rollout/groups_all_equal_frac": flat_group_fraction(ok),
        "rollout/singleton_groups": float(singleton_groups(ok)),
    }


def singleton_groups(ok: Sequence[ScoredSample]) -> int:
    """Groups left with one ok sample: a group-relative estimator gives it its raw reward (no baseline)."""
    sizes: dict[str, int] = {}
    for s in ok:
        sizes[s.request.group_id] = sizes.get(s.request.group_id, 0) + 1
    return sum(n == 1 for n in sizes.values())


def flat_group_fraction(ok: Sequence[ScoredSample]) -> float:
    """Fraction of prompts whose responses all got the same reward (group-relative estimators learn nothing)."""
    groups: dict[str, set[float]] = {}
    for s in ok:
        groups.setdefault(s.request.group_id, set()).add(s.reward)
    return sum(len(v) == 1 for v in groups.values()) / len(groups)
