"""A reward function that raises and one that hangs, inside a real run (sync_ppo: both apps score through
`trainers.rollout.rollout.score_all`): each hit sample is a counted `reward_error` with its reason, never a 0 reward and
never trained on, and the run goes on to its last step."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from faults_apps import app_flags
from faults_tally import FaultTally
from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardFn, RewardResult
from rollout_core import Trajectory
from run_lifecycle import read_metrics
from sync_ppo.cli import parse
from trainers.dumps import read_dump
from trainers.rollout import rollout
from trainers.rollout.samples import GenRequest, SampleStatus, ScoredSample
from trainers.sync_ppo import trainer as sync_trainer

pytestmark = pytest.mark.faults

TIMEOUT_S = 1.0


class FaultyRewards:
    """During training's scoring only (validation scores through its own module): the first prompt seen raises on
    every sample, the second hangs on its first sample (until released), every other call is the task's own."""

    def __init__(self) -> None:
        self.kind: dict[str, str] = {}
        self.hung = 0
        self.release = threading.Event()
        self.scored: list[list[ScoredSample]] = []

    def wrap(self, inner: RewardFn) -> RewardFn:
        def reward(text: str, example: TaskExample) -> RewardResult:
            if example.uid not in self.kind and len(self.kind) < 2:
                self.kind[example.uid] = "hang" if self.kind else "raise"
            kind = self.kind.get(example.uid)
            if kind == "raise":
                raise RuntimeError("injected: the grader crashed")
            if kind == "hang" and not self.hung:
                self.hung += 1
                self.release.wait(300)
            return inner(text, example)

        return reward

    def score_all(self, real: Callable[..., list[ScoredSample]]) -> Callable[..., list[ScoredSample]]:
        def spy(
            tokenizer: object,
            reward_fn: RewardFn,
            requests: Sequence[GenRequest],
            trajectories: Sequence[Trajectory],
            **kw: float,
        ) -> list[ScoredSample]:
            out = real(tokenizer, self.wrap(reward_fn), requests, trajectories, **kw)
            self.scored.append(out)
            return out

        return spy


def test_a_raising_and_a_hanging_reward_are_counted_errors_and_the_run_goes_on(
    tmp_path: Path, warmup_cache: Path, monkeypatch: pytest.MonkeyPatch, tally: FaultTally
) -> None:
    faulty = FaultyRewards()
    monkeypatch.setattr(sync_trainer, "score_all", faulty.score_all(rollout.score_all))
    run = tmp_path / "run"
    cfg, _ = parse(app_flags(run, warmup_cache, "--run.steps", "3", "--run.checkpoint_every", "3",
                             "--rollout.reward_timeout_s", str(TIMEOUT_S)))  # fmt: skip
    t0 = time.perf_counter()
    try:
        sync_trainer.train(cfg)
    finally:
        faulty.release.set()
    wall = time.perf_counter() - t0
    tally.schedule(faults=2)
    raised, hung = (next(uid for uid, k in faulty.kind.items() if k == kind) for kind in ("raise", "hang"))
    tally.note(
        f"injected: a reward raising on every sample of {raised} and one hanging on a sample of {hung} "
        f"(step 1); the run of 3 steps finished in {wall:.1f} s"
    )

    step1 = faulty.scored[0]
    errors = [s for s in step1 if s.status is SampleStatus.REWARD_ERROR]
    reasons = {s.uid: s.scored.error for s in errors if s.scored is not None}
    tally.check(len(faulty.scored) == 3, f"training scored {len(faulty.scored)} steps, expected 3: the run stopped")
    tally.check({s.request.example.uid for s in errors} == {raised, hung}, f"errors on other prompts: {reasons}")
    raise_reasons = {reasons[s.uid] for s in errors if s.request.example.uid == raised}
    tally.check(raise_reasons == {"RuntimeError: injected: the grader crashed"}, f"raise reasons {reasons}")
    timed_out = [r for r in reasons.values() if r is not None and r.startswith("TimeoutError: the reward function")]
    tally.check(len(timed_out) == faulty.hung == 1, f"expected one timed-out reward call, got {reasons}")
    rows = {r["step"]: r for r in read_metrics(run / "metrics.jsonl")}
    tally.check(sorted(rows) == [0, 1, 2, 3], f"metrics rows {sorted(rows)}: the run did not reach its last step")
    tally.check(rows[1]["reward/num_error"] == len(errors), f"reward/num_error {rows[1]['reward/num_error']}")
    tally.check(rows[2]["reward/num_error"] == rows[3]["reward/num_error"] == 0, "errors after the faulty step")
    dumped = {r.uid: r for r in read_dump(run / "rollouts" / "1.jsonl")}
    tally.check(
        all(dumped[s.uid].reward is None and dumped[s.uid].advantage is None for s in errors),
        "a reward error was scored or trained on",
    )
    tally.check(
        all(dumped[s.uid].advantage is not None for s in step1 if s.status is SampleStatus.OK),
        "an ok sample of the faulty step was not trained on",
    )
