"""Property tests of the resume loop over random prompts, abort schedules, version bumps and engine behaviours."""

import asyncio

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_core import (
    RoutingSpec,
    RoutingTrace,
    SamplingParams,
    StopReason,
    TrajectoryStatus,
    generate_with_resume,
)
from rollout_core.testing import ScriptedEngine, decode_row, decode_version

SPEC = RoutingSpec(num_layers=2, top_k=2, num_experts=256)
EVENTS = st.dictionaries(st.integers(1, 80), st.sampled_from(["bump", "abort", "bump_abort"]), max_size=12)


class SpyEngine:
    """Forwards to a ScriptedEngine and keeps every (context_len, segment) pair it returned."""

    def __init__(self, inner: ScriptedEngine) -> None:
        self.inner = inner
        self.segments: list[tuple[int, object]] = []
        self.routing_spec = inner.routing_spec

    @property
    def weight_version(self) -> int:
        return self.inner.weight_version

    async def generate(self, request_id, prompt_ids, params):
        seg = await self.inner.generate(request_id, prompt_ids, params)
        self.segments.append((len(prompt_ids), seg))
        return seg

    async def abort(self, request_id):
        return await self.inner.abort(request_id)


def run(engine, prompt, params, **kw):
    return asyncio.run(generate_with_resume(engine, "req", prompt, params, **kw))


@settings(max_examples=300, deadline=None)
@given(
    prompt_len=st.integers(1, 24),
    max_new=st.integers(1, 40),
    events=EVENTS,
    routing_on_abort=st.booleans(),
    honor_start=st.booleans(),
    stop_prob=st.sampled_from([0.0, 0.05]),
    preempt_prob=st.sampled_from([0.0, 0.3]),
    partial=st.booleans(),
    max_resumes=st.integers(0, 6),
    seed=st.integers(0, 1000),
)
def test_resume_loop_invariants(
    prompt_len,
    max_new,
    events,
    routing_on_abort,
    honor_start,
    stop_prob,
    preempt_prob,
    partial,
    max_resumes,
    seed,
):
    inner = ScriptedEngine(
        routing_spec=SPEC,
        seed=seed,
        events=events,
        routing_on_abort=routing_on_abort,
        honor_routed_experts_start=honor_start,
        stop_prob=stop_prob,
        preempt_prob=preempt_prob,
    )
    engine = SpyEngine(inner)
    prompt = [(3 * i + seed) % 500 + 2 for i in range(prompt_len)]
    traj = run(
        engine,
        prompt,
        SamplingParams(max_new_tokens=max_new, seed=seed),
        partial_rollout=partial,
        max_resumes=max_resumes,
    )
    n_resp = len(traj.response_ids)

    # the budget is never exceeded; tokens, log-probs and versions stay aligned
    assert n_resp <= max_new
    traj.check_aligned()
    assert [decode_version(lp) for lp in traj.response_log_probs] == traj.token_versions

    # every call re-submits exactly prompt + all tokens so far, asking only for rows it lacks
    produced = 0
    for record in inner.calls:
        assert record.context_len == prompt_len + produced
        produced += record.num_tokens
    assert produced == n_resp
    assert traj.num_preempted == sum(r.num_preempted for r in inner.calls)

    # status and resume accounting
    aborted_calls = sum(1 for r in inner.calls if r.stop_reason == StopReason.ABORT)
    assert traj.num_resumes == len(inner.calls) - 1
    if traj.status == TrajectoryStatus.OK:
        assert traj.stop_reason in (StopReason.STOP, StopReason.LENGTH)
        assert traj.stop_reason != StopReason.LENGTH or n_resp == max_new
    elif traj.status == TrajectoryStatus.ABORTED:
        assert not partial and aborted_calls == 1 and traj.stop_reason == StopReason.ABORT
    else:
        assert traj.status == TrajectoryStatus.TRUNCATED
        assert partial and aborted_calls == max_resumes + 1

    # routing: contiguous, never duplicated, each row tagged with the pass that computed it
    trace = traj.routing
    rows = trace.to_numpy()
    decoded = [decode_row(r) for r in rows]
    assert [p for p, _ in decoded] == list(range(len(trace)))
    assert [v for _, v in decoded] == list(trace.versions)
    if traj.status == TrajectoryStatus.OK:
        assert len(trace) == traj.num_tokens - 1 and trace.missing(traj.num_tokens) == []
    if routing_on_abort:
        # every row that predicts a response token came from the very pass that sampled that token
        assert list(traj.routing_version_lag()) == [0] * min(n_resp, len(trace) - prompt_len + 1)
    assert np.all(traj.routing_version_lag() >= 0)


@settings(max_examples=150, deadline=None)
@given(prompt_len=st.integers(1, 16), max_new=st.integers(1, 30), events=EVENTS, routing_on_abort=st.booleans())
def test_latest_mode_reproduces_replace(prompt_len, max_new, events, routing_on_abort):
    inner = ScriptedEngine(routing_spec=SPEC, events=events, routing_on_abort=routing_on_abort)
    engine = SpyEngine(inner)
    traj = run(
        engine,
        list(range(2, 2 + prompt_len)),
        SamplingParams(max_new_tokens=max_new, seed=1),
        routing="latest",
    )
    expected = RoutingTrace(SPEC)
    for context_len, seg in engine.segments:
        assert seg.routed_experts_start == 0  # latest asks every call for its whole context
        if seg.token_ids and seg.routed_experts is not None:
            n = len(seg.routed_experts)
            expected.replace(seg.routed_experts, version=seg.row_versions(context_len, 0, n), start=0)
    assert traj.routing == expected


def test_per_position_and_latest_differ_after_a_resume():
    """Per-position keeps the old prefix rows; latest re-labels them with the re-prefill's newer version."""
    events = {4: "bump_abort"}
    per = run(ScriptedEngine(events=events), [5, 6, 7], SamplingParams(max_new_tokens=6, seed=0))
    latest = run(ScriptedEngine(events=events), [5, 6, 7], SamplingParams(max_new_tokens=6, seed=0), routing="latest")
    assert per.response_ids == latest.response_ids and per.token_versions == [0, 0, 0, 1, 1, 1]
    assert list(per.routing.versions) == [0, 0, 0, 0, 0, 1, 1, 1]
    assert list(latest.routing.versions) == [1] * 8


def test_concatenating_every_call_duplicates_rows():
    """Documents the original anti-pattern: appending each resumed call's full routing duplicates the prefix."""
    engine = SpyEngine(ScriptedEngine(events={3: "abort"}, honor_routed_experts_start=False))
    traj = run(engine, [5, 6, 7], SamplingParams(max_new_tokens=4, seed=0))
    concatenated = np.concatenate([np.asarray(seg.routed_experts) for _, seg in engine.segments])
    positions = [decode_row(r)[0] for r in concatenated]
    first_call, second_call = [0, 1, 2, 3], [0, 1, 2, 3, 4, 5]
    assert positions == [*first_call, *second_call]  # 10 rows, the prefix twice, every later row shifted
    assert traj.num_tokens - 1 == 6 and [decode_row(r)[0] for r in traj.routing.to_numpy()] == list(range(6))


def test_vllm_like_engine_fills_aborted_rows_from_the_next_call():
    """Without routing on abort, the rows come from the resumed call's re-prefill, tagged with its version."""
    engine = ScriptedEngine(events={4: "bump_abort"}, routing_on_abort=False)
    traj = run(engine, [5, 6, 7], SamplingParams(max_new_tokens=6, seed=0))
    assert traj.token_versions == [0, 0, 0, 1, 1, 1]
    assert list(traj.routing.versions) == [1] * 8
    assert list(traj.routing_version_lag()) == [1, 1, 1, 0, 0, 0]


def test_pause_keep_gives_per_token_versions_in_one_call():
    engine = ScriptedEngine(events={3: "bump", 5: "bump"})
    traj = run(engine, [5, 6], SamplingParams(max_new_tokens=6, seed=0))
    assert traj.num_resumes == 0 and traj.token_versions == [0, 0, 1, 1, 2, 2]
    assert list(traj.routing.versions) == [0, 0, 0, 1, 1, 2, 2]


def test_dense_engine_gives_no_routing():
    traj = run(ScriptedEngine(routing_spec=None, events={2: "abort"}), [4, 5], SamplingParams(max_new_tokens=5))
    assert traj.routing is None and traj.status == TrajectoryStatus.OK and len(traj.response_ids) == 5


def test_zero_token_abort_counts_as_resume_and_adds_no_routing():
    engine = SpyEngine(ScriptedEngine(events={1: "abort", 2: "abort"}))
    traj = run(engine, [5, 6, 7], SamplingParams(max_new_tokens=3, seed=0))
    assert [len(seg.token_ids) for _, seg in engine.segments] == [0, 0, 3]
    assert traj.num_resumes == 2 and len(traj.routing) == 5


def test_partial_rollout_off_marks_aborted_never_ok():
    traj = run(
        ScriptedEngine(events={3: "bump_abort"}),
        [5, 6],
        SamplingParams(max_new_tokens=8),
        partial_rollout=False,
    )
    assert traj.status == TrajectoryStatus.ABORTED and traj.stop_reason == StopReason.ABORT
    assert len(traj.response_ids) == 2


def test_exceeding_max_resumes_marks_truncated():
    traj = run(
        ScriptedEngine(events={i: "abort" for i in range(2, 40, 2)}),
        [5],
        SamplingParams(max_new_tokens=30),
        max_resumes=3,
    )
    assert traj.status == TrajectoryStatus.TRUNCATED and traj.num_resumes == 3
