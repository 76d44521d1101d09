"""The staleness bound and long responses, on a scripted rollouter whose response lengths are known.

Every third prompt is long: its group takes `LONG_TICKS` ticks to generate and so spans weight pushes; the others
take one tick. The real `Broker` (admission, back-pressure, lowest-index take) runs the pipeline tick by tick:
the rollouter leases what admission allows and delivers what is due, the trainer takes a step whenever
`prompts_per_step` groups it may train are ready, then pushes. Under `staleness_policy correct` every prompt is
trained exactly once, the long ones included, and generated once; under `rerun` the long ones come back too
stale and are generated again (twice, here, for some), trained later than their place: the cost the new default
removes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from async_pipeline.broker import Broker
from async_pipeline.group import ExcludedGroup, FinishedGroup
from async_pipeline.lengths import length_metrics, read_excluded, write_excluded
from rl_tasks.example import TaskExample
from rollout_core import SamplingParams, Trajectory
from run_lifecycle import RunDir
from trainers.rollout.samples import GenRequest, SampleStatus, ScoredSample

P, S, STEPS = 2, 1, 16  # prompts per step, max staleness, trainer steps
LONG_TICKS, LONG_TOKENS, SHORT_TOKENS = 4, 40, 5


def is_long(index: int) -> bool:
    return index % 3 == 0


def scripted_group(index: int, first_version: int, last_version: int) -> FinishedGroup:
    """One response whose tokens were sampled from `first_version` (at its lease) up to `last_version`."""
    n = LONG_TOKENS if is_long(index) else SHORT_TOKENS
    versions = [first_version + (last_version - first_version) * j // max(n - 1, 1) for j in range(n)]
    example = TaskExample(uid=f"u{index}", data_source="test", prompt="1+1=", ground_truth="2")
    request = GenRequest(f"p{index}-r0", f"p{index}", example, 0, 0, SamplingParams(max_new_tokens=n))
    trajectory = Trajectory(prompt_ids=[1, 2], response_ids=[3] * n, token_versions=versions)
    sample = ScoredSample(request, trajectory, "", 1.0, SampleStatus.OK)
    return FinishedGroup(index, (sample,), 0, 0.0)


@dataclass
class Outcome:
    trained: list[int]  # prompt indices in the order they were trained
    excluded: list[ExcludedGroup]
    lags: list[int]  # per trained group: trainer version - its oldest token's version
    cursor: int  # prompts started
    leased: int  # prompt generations started (a prompt that runs again counts again)
    metrics: list[dict[str, float]]


async def simulate(policy: str) -> Outcome:
    broker = Broker(P, S, (1 + S) * P, 0, rerun_stale=policy == "rerun")
    ledger = broker.ledger
    version = tick = 0
    running: dict[int, tuple[int, int]] = {}  # prompt -> (tick it was leased, served version then)
    out = Outcome([], [], [], 0, 0, [])
    while version < STEPS:
        tick += 1
        assert tick < 50 * STEPS, f"the pipeline stalled at version {version} ({broker.stats().describe()})"
        if ledger.leasable(broker.served_version) > 0:
            for t in await broker.lease(0, 100):
                running[t.index] = (tick, broker.served_version)
        for k, (start, first) in sorted(running.items()):
            due = tick - start >= (LONG_TICKS if is_long(k) else 1)
            if due and ledger.num_ready < broker.capacity:
                assert await broker.complete(scripted_group(k, first, version))
                del running[k]
        stale = len(ledger.stale_ready(version)) if broker.rerun_stale else 0
        if ledger.num_ready - stale >= P:
            groups, stale = await broker.take(P, version)
            excluded = [ExcludedGroup.of(g) for g in stale]  # what the trainer records of them
            out.trained += [g.index for g in groups]
            out.excluded += excluded
            out.lags += [version - g.min_version for g in groups if g.min_version is not None]
            out.metrics.append(length_metrics(groups, excluded))
            version += 1
            await broker.set_served_version(version)
    out.cursor, out.leased = ledger.cursor, ledger.counters.leased
    return out


def test_with_correct_every_prompt_is_trained_exactly_once_long_ones_included() -> None:
    got = asyncio.run(simulate("correct"))
    assert len(got.trained) == len(set(got.trained)) == P * STEPS
    assert got.excluded == []
    # in flight at the end: at most what admission allows beyond the trained prompts
    assert set(range(got.cursor)) - set(got.trained) <= set(range(got.cursor - (1 + S) * P, got.cursor))
    long_trained = [k for k in got.trained if is_long(k)]
    assert len(long_trained) >= P * STEPS // 3 - (1 + S) * P
    assert max(got.lags) > S  # long groups do come back beyond the bound: the trainer corrects their old tokens
    assert got.leased == got.cursor  # no prompt generated twice


def test_with_rerun_long_prompts_come_back_too_stale_and_are_generated_again() -> None:
    got = asyncio.run(simulate("rerun"))
    assert len(got.trained) == len(set(got.trained))  # never twice, even after running again
    assert max(got.lags) <= S
    assert got.excluded and all(is_long(g.index) for g in got.excluded)
    assert all(g.response_lengths == (LONG_TOKENS,) for g in got.excluded)
    assert got.leased - got.cursor == len(got.excluded)  # each exclusion is one more generation of its prompt
    assert len({g.index for g in got.excluded}) < len(got.excluded)  # some long prompt was excluded twice
    excluded_means = [m["staleness/excluded_len_mean"] for m in got.metrics if "staleness/excluded_len_mean" in m]
    assert excluded_means and set(excluded_means) == {float(LONG_TOKENS)}
    correct = asyncio.run(simulate("correct"))
    position = {k: i for i, k in enumerate(got.trained)}
    delayed = [position[g.index] - correct.trained.index(g.index) for g in got.excluded if g.index in position]
    assert delayed and min(delayed) > 0  # an excluded prompt is trained later than under correct


def test_excluded_groups_round_trip_through_the_run_dir_and_a_step_without_any_leaves_no_file(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run")
    groups = [ExcludedGroup(3, 0, (40, 38)), ExcludedGroup(6, None, (0,))]
    write_excluded(run, 12, groups)
    write_excluded(run, 2, groups[:1])
    assert read_excluded(run) == [groups[0], *groups]  # step order: 2, then 12
    write_excluded(run, 12, [])  # the step ran again (after a resume) and excluded nothing
    assert read_excluded(run) == groups[:1]
    assert not (tmp_path / "run" / "excluded" / "12.json").exists()
