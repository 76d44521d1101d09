"""TrajectoryBuilder: merges engine segments (and tool tokens) into one Trajectory by the routing rule."""

from __future__ import annotations

from typing import Literal

from routing_state import RoutingSpec, RoutingTrace

from rollout_core.segment import Segment, StopReason
from rollout_core.trajectory import NOT_SAMPLED, Trajectory, TrajectoryStatus

RoutingMode = Literal["per_position", "latest"]


class TrajectoryBuilder:
    """Accumulates one trajectory. Invariants after every call:

    - response ids, log-probs, versions and loss mask have equal length;
    - with `per_position`, routing rows are only ever appended (a resumed call's re-prefilled prefix never
      overwrites a row); with `latest`, each call with tokens replaces the rows from its start on;
    - a segment without tokens adds nothing (not even routing).
    """

    def __init__(self, prompt_ids: list[int], spec: RoutingSpec | None, routing: RoutingMode) -> None:
        if routing not in ("per_position", "latest"):
            raise ValueError(f"routing: expected 'per_position' or 'latest', got {routing!r}")
        self.mode: RoutingMode = routing
        self.traj = Trajectory(prompt_ids=list(prompt_ids))
        self.traj.routing = RoutingTrace(spec) if spec is not None else None

    @property
    def context(self) -> list[int]:
        return self.traj.all_ids

    def routing_start(self) -> int:
        """The first input position whose row the next call should return."""
        if self.traj.routing is None or self.mode == "latest":
            return 0
        return len(self.traj.routing)

    def add_segment(self, seg: Segment, context_len: int, budget: int) -> None:
        """Merges one engine call whose input context had `context_len` tokens and whose budget was `budget`."""
        g = len(seg.token_ids)
        if g > budget:
            raise ValueError(f"engine returned {g} tokens for a call with max_new_tokens={budget}")
        t = self.traj
        t.num_preempted += seg.num_preempted
        if g == 0:
            return
        t.response_ids.extend(int(x) for x in seg.token_ids)
        t.response_log_probs.extend(float(x) for x in seg.log_probs)
        t.token_versions.extend(seg.versions())
        t.loss_mask.extend([1] * g)
        if t.routing is not None and seg.routed_experts is not None:
            self._add_rows(seg, context_len, g)

    def _add_rows(self, seg: Segment, context_len: int, g: int) -> None:
        trace = self.traj.routing
        assert trace is not None
        start = seg.routed_experts_start
        num_rows = _num_rows(seg.routed_experts)
        expected = context_len + g - 1 - start
        if num_rows != expected:
            raise ValueError(
                f"routing rows: a call with context {context_len} that generated {g} tokens, returning rows "
                f"from position {start}, must return {expected} rows (N-1 convention), got {num_rows}"
            )
        versions = seg.row_versions(context_len, start, num_rows)
        if self.mode == "latest":
            trace.replace(seg.routed_experts, version=versions, start=start)
        else:
            trace.extend(seg.routed_experts, version=versions, start=start)

    def add_tool_tokens(self, token_ids: list[int]) -> None:
        """Appends environment/tool tokens: masked out of the loss; their rows come from the next prefill."""
        t = self.traj
        t.response_ids.extend(int(x) for x in token_ids)
        t.response_log_probs.extend([0.0] * len(token_ids))
        t.token_versions.extend([NOT_SAMPLED] * len(token_ids))
        t.loss_mask.extend([0] * len(token_ids))

    def finish(self, stop_reason: StopReason, status: TrajectoryStatus, error: str | None = None) -> Trajectory:
        self.traj.stop_reason = stop_reason
        self.traj.status = status
        self.traj.error = error
        self.traj.check_aligned()
        return self.traj


def _num_rows(rows: object) -> int:
    if isinstance(rows, tuple) and len(rows) == 3 and isinstance(rows[0], bytes | bytearray | memoryview):
        return int(rows[1][0]) if len(rows[1]) else 0  # type: ignore[index]
    shape = getattr(rows, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 0
    return len(rows)  # type: ignore[arg-type]
