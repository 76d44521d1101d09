"""Every ValueError of rollout_core states what it got and what it expected."""

import asyncio

import numpy as np
import pytest
from rollout_core import (
    SamplingParams,
    Segment,
    StopReason,
    TrajectoryBuilder,
    drop_extra_last_row,
    generate_with_resume,
    run_agent_loop,
)
from rollout_core.testing import ScriptedEngine


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens: expected an int >= 1, got 0"),
        ({"temperature": -0.1}, "temperature: expected >= 0, got -0.1"),
        ({"top_p": 0.0}, r"top_p: expected in \(0, 1\], got 0.0"),
        ({"top_p": 1.5}, r"top_p: expected in \(0, 1\], got 1.5"),
        ({"top_k": -1}, r"top_k: expected an int >= 0 \(0 = off\), got -1"),
        ({"routed_experts_start": -2}, "routed_experts_start: expected >= 0, got -2"),
    ],
)
def test_bad_sampling_params_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_segment_fields_must_align():
    with pytest.raises(ValueError, match=r"expected one log-prob per token \(2\), got 1"):
        Segment(token_ids=[1, 2], log_probs=[-0.1], stop_reason="stop", weight_version=0)
    with pytest.raises(ValueError, match=r"expected one version per token \(1\), got 2"):
        Segment(token_ids=[1], log_probs=[-0.1], stop_reason="stop", weight_version=0, token_versions=[0, 1])
    with pytest.raises(ValueError, match="'halt' is not a valid StopReason"):
        Segment(token_ids=[], log_probs=[], stop_reason="halt", weight_version=0)
    with pytest.raises(ValueError, match="routed_experts_start: expected >= 0, got -1"):
        Segment(token_ids=[], log_probs=[], stop_reason="abort", weight_version=0, routed_experts_start=-1)


def run(engine, prompt, params=None, **kw):
    return asyncio.run(generate_with_resume(engine, "r", prompt, params or SamplingParams(max_new_tokens=4), **kw))


def test_resume_loop_rejects_bad_arguments():
    with pytest.raises(ValueError, match="expected at least one token, got an empty prompt"):
        run(ScriptedEngine(), [])
    with pytest.raises(ValueError, match="max_resumes: expected >= 0, got -1"):
        run(ScriptedEngine(), [3], max_resumes=-1)
    with pytest.raises(ValueError, match="routing: expected 'per_position' or 'latest', got 'all'"):
        run(ScriptedEngine(), [3], routing="all")


class OverBudgetEngine(ScriptedEngine):
    async def generate(self, request_id, prompt_ids, params):
        seg = await super().generate(request_id, prompt_ids, params)
        seg.token_ids.append(3)
        seg.log_probs.append(-1.0)
        return seg


def test_engine_exceeding_the_budget_is_an_error():
    with pytest.raises(ValueError, match="engine returned 5 tokens for a call with max_new_tokens=4"):
        run(OverBudgetEngine(routing_spec=None), [3])


def test_engine_returning_n_rows_is_an_error_unless_normalised():
    with pytest.raises(ValueError, match=r"must return 5 rows \(N-1 convention\), got 6"):
        run(ScriptedEngine(full_rows=True), [3, 4])

    class Normalising(ScriptedEngine):
        async def generate(self, request_id, prompt_ids, params):
            seg = await super().generate(request_id, prompt_ids, params)
            return drop_extra_last_row(seg, len(prompt_ids))

    traj = run(Normalising(full_rows=True, events={2: "abort"}), [3, 4])
    assert len(traj.routing) == traj.num_tokens - 1


def test_drop_extra_last_row_rejects_other_counts():
    seg = Segment(
        token_ids=[1],
        log_probs=[-1.0],
        stop_reason="stop",
        weight_version=0,
        routed_experts=np.zeros((5, 1, 1), dtype=np.int64),
    )
    with pytest.raises(ValueError, match=r"expected 2 \(N-1\) or 3 \(N\) rows, got 5"):
        drop_extra_last_row(seg, context_len=2)


def test_row_versions_of_a_tokenless_segment_is_an_error():
    seg = Segment(token_ids=[], log_probs=[], stop_reason=StopReason.ABORT, weight_version=0)
    with pytest.raises(ValueError, match="a segment without tokens has no forward pass"):
        seg.row_versions(3, 0, 2)


def test_builder_rejects_unknown_routing_mode():
    with pytest.raises(ValueError, match="got 'sometimes'"):
        TrajectoryBuilder([1], None, "sometimes")  # type: ignore[arg-type]


def test_agent_loop_rejects_bad_arguments():
    params = SamplingParams(max_new_tokens=2)
    with pytest.raises(ValueError, match="max_turns: expected >= 1, got 0"):
        asyncio.run(run_agent_loop(ScriptedEngine(), "a", [3], params, lambda c: None, max_turns=0))
    with pytest.raises(ValueError, match="got an empty prompt"):
        asyncio.run(run_agent_loop(ScriptedEngine(), "a", [], params, lambda c: None))


def test_scripted_engine_rejects_bad_prompts():
    with pytest.raises(ValueError, match=r"expected token ids in \[0, 512\), got 512"):
        run(ScriptedEngine(), [512])
    with pytest.raises(ValueError, match=r"exceeds the context \(8\)"):
        run(ScriptedEngine(max_context=8), [3] * 6)
