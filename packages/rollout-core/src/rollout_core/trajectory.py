"""Trajectory: one finished (or abandoned) generation after the resume loop."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from routing_state import RoutingTrace

from rollout_core.segment import StopReason

NOT_SAMPLED = -1  # token version of tokens no policy sampled (tool/observation tokens, loss_mask 0)


class TrajectoryStatus(enum.StrEnum):
    OK = "ok"  # finished with stop or length: a valid training sample
    TRUNCATED = "truncated"  # still aborted after max_resumes: excluded from training
    ABORTED = "aborted"  # aborted with partial_rollout=False: excluded from training, never a silent sample
    ERROR = "error"  # the engine, the environment or the reward raised: counted and excluded


@dataclass
class Trajectory:
    """Prompt, response and per-response-token provenance, aligned index by index.

    `response_log_probs`, `token_versions` and `loss_mask` have one entry per response token. Tool tokens
    have `loss_mask` 0, log-prob 0.0 and version `NOT_SAMPLED`. `routing` holds rows for positions
    `0 .. len(prompt)+len(response)-2` when `status` is ok and the model routes (None for dense models).
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_log_probs: list[float] = field(default_factory=list)
    token_versions: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    routing: RoutingTrace | None = None
    num_resumes: int = 0
    num_preempted: int = 0
    num_turns: int = 0
    stop_reason: StopReason = StopReason.LENGTH
    status: TrajectoryStatus = TrajectoryStatus.OK
    error: str | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def all_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.response_ids]

    def _sampled_versions(self) -> list[int]:
        return [v for v in self.token_versions if v != NOT_SAMPLED]

    @property
    def min_version(self) -> int | None:
        """Oldest weight version that sampled a response token (None if none was sampled)."""
        sampled = self._sampled_versions()
        return min(sampled) if sampled else None

    @property
    def max_version(self) -> int | None:
        sampled = self._sampled_versions()
        return max(sampled) if sampled else None

    def routing_version_lag(self) -> np.ndarray:
        """Per sampled response token: version of the row that predicts it minus the token's own version.

        0 means the replayed routing came from the very pass that sampled the token; > 0 means the row was
        re-computed later (e.g. an engine that returned no routing for an aborted call). Tokens without a row
        are skipped.
        """
        if self.routing is None:
            return np.zeros(0, dtype=np.int64)
        rows = self.routing.versions
        prompt_len = len(self.prompt_ids)
        lags = [
            int(rows[prompt_len - 1 + j]) - v
            for j, v in enumerate(self.token_versions)
            if v != NOT_SAMPLED and prompt_len - 1 + j < len(rows)
        ]
        return np.asarray(lags, dtype=np.int64)

    def check_aligned(self) -> None:
        """Raises ValueError if the per-token lists disagree in length."""
        n = len(self.response_ids)
        for name in ("response_log_probs", "token_versions", "loss_mask"):
            got = len(getattr(self, name))
            if got != n:
                raise ValueError(f"Trajectory.{name}: expected {n} entries (one per response token), got {got}")
