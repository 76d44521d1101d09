"""Multi-turn agent loop: tool tokens are masked, get their rows from the next prefill, and never re-route turns."""

import asyncio

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_core import NOT_SAMPLED, SamplingParams, StopReason, TrajectoryStatus, run_agent_loop
from rollout_core.testing import ScriptedEngine, decode_row, decode_version

TOOL = [7, 8, 9]


def run(engine, tool_fn, **kw):
    params = kw.pop("params", SamplingParams(max_new_tokens=4, seed=0))
    return asyncio.run(run_agent_loop(engine, "agent", [5, 6, 7], params, tool_fn, **kw))


def test_tool_tokens_are_masked_and_unsampled():
    traj = run(ScriptedEngine(), lambda ctx: TOOL, max_turns=3)
    assert traj.status == TrajectoryStatus.OK and traj.num_turns == 3
    assert traj.loss_mask == [1] * 4 + [0] * 3 + [1] * 4 + [0] * 3 + [1] * 4
    assert traj.response_ids[4:7] == TOOL and traj.response_log_probs[4:7] == [0.0] * 3
    assert traj.token_versions[4:7] == [NOT_SAMPLED] * 3
    assert traj.routing.missing(traj.num_tokens) == []


def test_earlier_turns_keep_their_rows_after_a_weight_update():
    """verl#6054: the next turn's prefill must not re-route (re-version) the earlier turns."""
    engine = ScriptedEngine()

    def tool(ctx):
        engine.bump_version()  # new weights arrive between turns
        return TOOL

    traj = run(engine, tool, max_turns=2)
    versions = list(traj.routing.versions)
    # prompt 3 + turn 4 -> rows 0..5 from version 0; tool rows and turn-2 rows from version 1
    assert versions == [0] * 6 + [1] * 7
    assert [decode_row(r)[0] for r in traj.routing.to_numpy()] == list(range(13))


def test_tool_returning_none_ends_the_episode():
    traj = run(ScriptedEngine(), lambda ctx: None, max_turns=5)
    assert traj.num_turns == 1 and traj.loss_mask == [1] * 4


def test_async_tool_function_is_awaited():
    async def tool(ctx):
        await asyncio.sleep(0)
        return [11] if len(ctx) < 13 else None

    traj = run(ScriptedEngine(), tool, max_turns=5)
    assert traj.num_turns == 3 and traj.loss_mask.count(0) == 2


def test_tool_error_marks_the_trajectory_error():
    def tool(ctx):
        raise RuntimeError("sandbox died")

    traj = run(ScriptedEngine(), tool, max_turns=3)
    assert traj.status == TrajectoryStatus.ERROR and "sandbox died" in traj.error


def test_abort_in_a_later_turn_is_resumed():
    engine = ScriptedEngine(events={6: "bump_abort"})
    traj = run(engine, lambda ctx: TOOL, max_turns=2)
    assert traj.status == TrajectoryStatus.OK and traj.num_resumes == 1
    assert traj.token_versions == [0] * 4 + [NOT_SAMPLED] * 3 + [0, 1, 1, 1]


def test_partial_rollout_off_aborts_the_whole_episode():
    traj = run(ScriptedEngine(events={6: "abort"}), lambda ctx: TOOL, max_turns=3, partial_rollout=False)
    assert traj.status == TrajectoryStatus.ABORTED and traj.stop_reason == StopReason.ABORT


@settings(max_examples=120, deadline=None)
@given(
    turns=st.integers(1, 4),
    tool_lens=st.lists(st.integers(0, 5), min_size=4, max_size=4),
    max_new=st.integers(1, 8),
    events=st.dictionaries(st.integers(1, 40), st.sampled_from(["bump", "abort", "bump_abort"]), max_size=8),
    routing_on_abort=st.booleans(),
)
def test_agent_loop_invariants(turns, tool_lens, max_new, events, routing_on_abort):
    engine = ScriptedEngine(events=events, routing_on_abort=routing_on_abort)
    calls = iter(tool_lens)

    def tool(ctx):
        return [20 + i for i in range(next(calls))]

    traj = run(engine, tool, max_turns=turns, params=SamplingParams(max_new_tokens=max_new, seed=3))
    traj.check_aligned()
    sampled = [i for i, m in enumerate(traj.loss_mask) if m]
    assert all(traj.token_versions[i] == decode_version(traj.response_log_probs[i]) for i in sampled)
    assert all(traj.token_versions[i] == NOT_SAMPLED for i, m in enumerate(traj.loss_mask) if not m)
    assert len(sampled) <= turns * max_new
    rows = traj.routing.to_numpy()
    assert [decode_row(r)[0] for r in rows] == list(range(len(rows)))
    assert [decode_row(r)[1] for r in rows] == list(traj.routing.versions)
    assert np.all(np.diff(traj.routing.versions) >= 0)
    if traj.status == TrajectoryStatus.OK:
        assert traj.routing.missing(traj.num_tokens) == []
