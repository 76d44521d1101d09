"""Abort storms over `rollout_core.generate_with_resume` on the scripted engine: thousands of seeded schedules of
concurrent responses hit by aborts of single requests, pauses in both modes (`keep`: the version is bumped under
running calls; `abort`: every in-flight call ends, then the version is bumped) and scripted events at token
steps, with every invariant of `faults_invariants` checked on every response, plus the scripted engine's own
provenance (each token's log-prob and each row's content encode the version and position of the pass that made
them)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest
from faults_invariants import Expect, LoggingEngine, check_response
from faults_tally import FaultTally
from rollout_core import RoutingSpec, SamplingParams, Trajectory, generate_with_resume
from rollout_core.testing import ScriptedEngine, decode_row, decode_version

pytestmark = pytest.mark.faults

SCHEDULES = 6000
SPEC = RoutingSpec(num_layers=2, top_k=2, num_experts=256)
EOS = 1


@dataclass(frozen=True)
class Schedule:
    """A seeded interleaving: `actions` are (yields to wait, action) run by a controller while the responses run."""

    seed: int
    prompts: list[list[int]]
    max_new: list[int]
    partial: bool
    max_resumes: int
    rows_on_abort: bool
    events: dict[int, str]
    actions: list[tuple[int, str]]
    abort_prob: float
    stop_prob: float

    @classmethod
    def draw(cls, seed: int) -> Schedule:
        rng = random.Random(seed)
        n = rng.randint(1, 6)
        kinds = ["abort_one", "pause_keep", "pause_abort", "noop"]
        return cls(
            seed=seed,
            prompts=[[rng.randrange(2, 500) for _ in range(rng.randint(1, 12))] for _ in range(n)],
            max_new=[rng.randint(1, 24) for _ in range(n)],
            partial=rng.random() < 0.85,
            max_resumes=rng.randint(0, 6),
            rows_on_abort=rng.random() < 0.7,
            events={rng.randint(1, 120): rng.choice(["bump", "abort", "bump_abort"]) for _ in range(rng.randint(0, 8))},
            actions=[(rng.randint(0, 8), rng.choice(kinds)) for _ in range(rng.randint(0, 12))],
            abort_prob=rng.choice([0.0, 0.0, 0.02, 0.1]),
            stop_prob=rng.choice([0.0, 0.05]),
        )

    def faults(self) -> int:
        return len(self.events) + sum(a != "noop" for _, a in self.actions)


async def _controller(engine: ScriptedEngine, rids: list[str], s: Schedule, rng: random.Random) -> None:
    for wait, action in s.actions:
        for _ in range(wait):
            await asyncio.sleep(0)
        if action == "abort_one":
            await engine.abort(rng.choice(rids))
        elif action == "pause_keep":
            engine.bump_version()  # running calls continue under the new version
        elif action == "pause_abort":
            engine.bump_version(abort_inflight=True)


async def _run(s: Schedule) -> tuple[LoggingEngine, ScriptedEngine, list[Trajectory]]:
    inner = ScriptedEngine(
        routing_spec=SPEC,
        seed=s.seed,
        events=s.events,
        routing_on_abort=s.rows_on_abort,
        abort_prob=s.abort_prob,
        stop_prob=s.stop_prob,
        eos_token_id=EOS,
    )
    engine = LoggingEngine(inner)
    rids = [f"s{s.seed}-r{i}" for i in range(len(s.prompts))]
    control = asyncio.create_task(_controller(inner, rids, s, random.Random(s.seed + 1)))
    params = [SamplingParams(max_new_tokens=m, seed=s.seed * 31 + i) for i, m in enumerate(s.max_new)]
    calls = [
        generate_with_resume(engine, rid, prompt, p, partial_rollout=s.partial, max_resumes=s.max_resumes)  # type: ignore[arg-type]
        for rid, prompt, p in zip(rids, s.prompts, params, strict=True)
    ]
    trajs = list(await asyncio.gather(*calls))
    control.cancel()
    await asyncio.gather(control, return_exceptions=True)
    return engine, inner, trajs


def _check_provenance(t: FaultTally, traj: Trajectory, what: str) -> None:
    """The scripted engine writes the sampling pass's version into each log-prob and (position, version) into
    each row: what the trajectory says about them must be what the engine did."""
    t.check(
        [decode_version(lp) for lp in traj.response_log_probs] == traj.token_versions,
        f"{what}: a token's version is not the version of the pass that sampled it",
    )
    assert traj.routing is not None
    decoded = [decode_row(r) for r in traj.routing.to_numpy()]
    versions = traj.routing.versions.tolist()
    t.check([pos for pos, _ in decoded] == list(range(len(decoded))), f"{what}: row positions have a gap")
    t.check(
        [v for _, v in decoded] == [v % SPEC.num_experts for v in versions],
        f"{what}: a row's version tag is not the version of the pass that computed it",
    )


def test_abort_storms_on_the_scripted_engine_keep_every_invariant(tally: FaultTally) -> None:
    responses = tokens = resumed = 0

    async def main() -> None:
        nonlocal responses, tokens, resumed
        for seed in range(SCHEDULES):
            s = Schedule.draw(seed)
            engine, inner, trajs = await _run(s)
            tally.schedule(s.faults())
            tally.check(not inner.running, f"schedule {seed}: calls still running after every response ended")
            for i, traj in enumerate(trajs):
                rid, what = f"s{seed}-r{i}", f"schedule {seed} response {i}"
                expect = Expect(s.prompts[i], s.max_new[i], s.partial, s.max_resumes, frozenset({EOS}), s.rows_on_abort)
                check_response(tally, traj, engine.calls[rid], expect, what)
                _check_provenance(tally, traj, what)
                responses += 1
                tokens += len(traj.response_ids)
                resumed += traj.num_resumes > 0

    asyncio.run(main())
    tally.note(
        f"injected: {SCHEDULES} seeded schedules of request aborts, pause keep/abort and scripted bump/abort "
        f"events; checked {responses} responses ({tokens} tokens, {resumed} resumed at least once)"
    )
    assert resumed > responses // 4  # the storms do interrupt generation
