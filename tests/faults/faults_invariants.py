"""The invariants of one response generated through aborts, pauses and version bumps, checked from the trajectory
and the log of every engine call that built it (what the engine was asked and what it returned).

- budget: never more than `max_new_tokens` response tokens;
- no token lost or duplicated across resumes: each call is asked for prompt + every token so far, and the
  response is exactly the concatenation of the calls' tokens (log-probs and versions alike);
- statuses: ok ends on stop or length (length: the full budget), aborted only without partial rollout, truncated
  only after `max_resumes + 1` aborted calls; every call but the last was aborted;
- routing: N-1 rows with no gap once a token exists (none missing when ok), never more;
- versions: a row's version is the version of the pass that sampled the next token (prompt rows: the first
  sampled token's); versions never go backwards along a response.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from faults_tally import FaultTally
from rollout_core import NOT_SAMPLED, SamplingParams, Segment, StopReason, Trajectory, TrajectoryStatus


@dataclass
class CallLog:
    """One engine call: the context it was given and the segment it returned."""

    prompt_ids: list[int]
    segment: Segment


@dataclass
class LoggingEngine:
    """Forwards to an engine and keeps every call of every request (`calls[request_id]`)."""

    inner: object
    calls: dict[str, list[CallLog]] = field(default_factory=dict)

    @property
    def weight_version(self) -> int:
        return self.inner.weight_version  # type: ignore[attr-defined]

    @property
    def routing_spec(self) -> object:
        return self.inner.routing_spec  # type: ignore[attr-defined]

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Segment:
        seg = await self.inner.generate(request_id, prompt_ids, params)  # type: ignore[attr-defined]
        self.calls.setdefault(request_id, []).append(CallLog(list(prompt_ids), seg))
        return seg

    async def abort(self, request_id: str) -> bool:
        return await self.inner.abort(request_id)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Expect:
    """What the caller asked for one response."""

    prompt: list[int]
    max_new: int
    partial: bool
    max_resumes: int
    stop_ids: frozenset[int]
    rows_on_abort: bool  # the engine returns routing rows for aborted calls (native: yes; vLLM-like: no)


def check_response(t: FaultTally, traj: Trajectory, calls: list[CallLog], e: Expect, what: str) -> None:
    n_resp = len(traj.response_ids)
    t.check(n_resp <= e.max_new, f"{what}: {n_resp} response tokens > budget {e.max_new}")
    t.check(
        all(len(getattr(traj, k)) == n_resp for k in ("response_log_probs", "token_versions", "loss_mask")),
        f"{what}: per-token lists not aligned",
    )
    _check_resumes(t, traj, calls, e, what)
    _check_status(t, traj, calls, e, what)
    _check_routing(t, traj, e, what)


def _check_resumes(t: FaultTally, traj: Trajectory, calls: list[CallLog], e: Expect, what: str) -> None:
    so_far: list[int] = []
    log_probs: list[float] = []
    versions: list[int] = []
    t.check(len(calls) >= 1, f"{what}: no engine call")
    for k, call in enumerate(calls):
        t.check(
            call.prompt_ids == e.prompt + so_far,
            f"{what}: call {k} got a context of {len(call.prompt_ids)} tokens, expected prompt + the "
            f"{len(so_far)} tokens so far",
        )
        so_far += call.segment.token_ids
        log_probs += call.segment.log_probs
        versions += call.segment.versions()
    t.check(traj.response_ids == so_far, f"{what}: response != concatenation of the calls' tokens")
    t.check(traj.response_log_probs == log_probs, f"{what}: log-probs != concatenation of the calls' log-probs")
    t.check(traj.token_versions == versions, f"{what}: token versions != the versions the engine reported")
    t.check(NOT_SAMPLED not in versions and versions == sorted(versions), f"{what}: versions go backwards {versions}")


def _check_status(t: FaultTally, traj: Trajectory, calls: list[CallLog], e: Expect, what: str) -> None:
    reasons = [c.segment.stop_reason for c in calls]
    n_resp = len(traj.response_ids)
    t.check(all(r == StopReason.ABORT for r in reasons[:-1]), f"{what}: a call before the last was not aborted")
    t.check(traj.num_resumes == len(calls) - 1, f"{what}: num_resumes {traj.num_resumes} != calls - 1")
    aborted = reasons.count(StopReason.ABORT)
    if traj.status is TrajectoryStatus.OK:
        t.check(traj.stop_reason in (StopReason.STOP, StopReason.LENGTH), f"{what}: ok with {traj.stop_reason}")
        if traj.stop_reason is StopReason.LENGTH:
            t.check(n_resp == e.max_new, f"{what}: length stop at {n_resp} < budget {e.max_new}")
        else:
            t.check(n_resp > 0 and traj.response_ids[-1] in e.stop_ids, f"{what}: stop without a stop token")
    elif traj.status is TrajectoryStatus.ABORTED:
        t.check(
            not e.partial and aborted == 1 and reasons[-1] == StopReason.ABORT,
            f"{what}: aborted with partial={e.partial}, {aborted} aborted calls",
        )
    else:
        t.check(traj.status is TrajectoryStatus.TRUNCATED, f"{what}: unexpected status {traj.status}")
        t.check(
            e.partial and aborted == e.max_resumes + 1 and n_resp < e.max_new,
            f"{what}: truncated after {aborted} aborted calls, max_resumes {e.max_resumes}",
        )


def _check_routing(t: FaultTally, traj: Trajectory, e: Expect, what: str) -> None:
    trace = traj.routing
    t.check(trace is not None, f"{what}: no routing trace")
    assert trace is not None
    n, p = traj.num_tokens, len(e.prompt)
    sampled = bool(traj.response_ids)
    t.check(len(trace) <= max(n - 1, 0), f"{what}: {len(trace)} rows > N-1 = {n - 1}")
    if traj.status is TrajectoryStatus.OK or (e.rows_on_abort and sampled):
        t.check(len(trace) == n - 1 and trace.missing(n) == [], f"{what}: {len(trace)} rows, expected N-1 = {n - 1}")
    if e.rows_on_abort and not sampled:
        t.check(len(trace) == 0, f"{what}: rows without any sampled token")
    rows = trace.versions.tolist()
    # the response token each row's pass sampled (prompt rows: the first); rows never outnumber the tokens
    predicted = [traj.token_versions[max(pos + 1 - p, 0)] for pos in range(len(rows))]
    if e.rows_on_abort:
        bad = [pos for pos, (v, want) in enumerate(zip(rows, predicted, strict=True)) if v != want]
        t.check(not bad, f"{what}: rows {bad[:5]} do not carry the version of the pass that sampled the next token")
    else:  # rows of aborted calls come from the next call that covers them: never older than the token
        bad = [pos for pos, (v, want) in enumerate(zip(rows, predicted, strict=True)) if v < want]
        t.check(not bad, f"{what}: rows {bad[:5]} are older than the token they predict")
