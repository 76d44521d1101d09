"""Staleness of trained samples, in weight versions: the bound and the metrics.

A trainer step that updates policy version `v` (its weights before the update) trains a token sampled by
version `u` with staleness `v - u` >= 0. A sample's staleness is its oldest token's (`v - min_version`); its
version span `max_version - min_version` > 0 means a weight push happened while it was being generated.
`max_staleness` k bounds it: policy `v` trains as sampled what versions `v - k .. v` sampled (k = 0: synchronous).
Every app's check of that bound goes through `oldest_trainable` (the broker's exclusion, the trainer's per-token
correction) or `checked_lag` (a batch sampled by a single version: FlowGRPO).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from rollout_core import NOT_SAMPLED, Trajectory


def oldest_trainable(policy_version: int, max_staleness: int) -> int:
    """The oldest weight version whose samples policy `policy_version` trains as sampled (older: too stale)."""
    return policy_version - max_staleness


def checked_lag(policy_version: int, sampled_by: int, max_staleness: int) -> int:
    """`policy_version - sampled_by` for samples all drawn by weights `sampled_by`; raises RuntimeError unless it
    is within [0, max_staleness] (newer weights than the policy, or too stale: the pipeline broke its bound)."""
    lag = policy_version - sampled_by
    if not 0 <= lag <= max_staleness:
        raise RuntimeError(
            f"policy version {policy_version}: got samples of weights {sampled_by}, expected weights "
            f"{oldest_trainable(policy_version, max_staleness)}..{policy_version} (max_staleness {max_staleness})"
        )
    return lag


def staleness_metrics(trajectories: Sequence[Trajectory], policy_version: int) -> dict[str, float]:
    """`staleness/*` over the sampled tokens of `trajectories` (those without a sampled token are skipped)."""
    sample_lag: list[int] = []
    spans: list[int] = []
    token_lag: list[int] = []
    for t in trajectories:
        if t.min_version is None or t.max_version is None:
            continue
        sample_lag.append(policy_version - t.min_version)
        spans.append(t.max_version - t.min_version)
        token_lag.extend(policy_version - v for v in t.token_versions if v != NOT_SAMPLED)
    if not sample_lag:
        return {}
    if min(sample_lag) < 0:
        raise ValueError(
            f"staleness: a token's version is newer than the policy being trained ({policy_version}); got lag "
            f"{min(sample_lag)} (versions went backwards?)"
        )
    return {
        "staleness/sample_mean": statistics.fmean(sample_lag),
        "staleness/sample_max": float(max(sample_lag)),
        "staleness/token_mean": statistics.fmean(token_lag),
        "staleness/multi_version_frac": sum(s > 0 for s in spans) / len(spans),
        "staleness/version_span_max": float(max(spans)),
    }
