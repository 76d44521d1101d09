"""`kill -9` of one actor of a running async_ppo app (in this process, on its own local Ray): a rollouter killed
while its engine is generating a group is replaced and no prompt is lost or trained twice; the trainer killed
mid-run makes the driver stop with an error naming the trainer, within seconds, never a hang."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from async_pipeline.async_ppo.pipeline import train
from async_pipeline.fleet import RolloutFleet
from async_pipeline.ledger import LedgerState
from async_ppo.cli import parse
from faults_apps import PROMPTS_PER_STEP, app_flags, descendant_pids, trained_prompt_indices
from faults_tally import FaultTally
from run_lifecycle import read_metrics

pytestmark = pytest.mark.faults

STEPS = 4
KILL_AT = "trainer step 2"  # the driver's wait during which the actor is killed


@pytest.fixture
def ray_dir() -> Iterator[str]:
    """A short temp dir for the app's own Ray session (socket paths must stay short)."""
    path = f"/tmp/flt_{uuid.uuid4().hex[:8]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_rollouter_killed_mid_group_is_replaced_and_every_prompt_is_trained_exactly_once(
    tmp_path: Path, warmup_cache: Path, ray_dir: str, monkeypatch: pytest.MonkeyPatch, tally: FaultTally
) -> None:
    real_wait = RolloutFleet.wait
    killed: dict[str, int] = {}

    def engine_activity(rollouter: Any) -> tuple[int, int, int]:
        """(running calls, pid, generated tokens) of a rollouter's native engine, read inside its actor (a local
        function: Ray ships it by value)."""
        metrics = rollouter.engine.metrics()
        return metrics.running, os.getpid(), metrics.generated_tokens

    async def wait(self: RolloutFleet, ref: Any, what: str, *args: Any, **kw: Any) -> Any:
        if what == KILL_AT and not killed:
            handle = self.members[0].handle
            deadline = time.monotonic() + 60
            while True:  # until its engine is mid-generation (a group is partly generated)
                running, pid, tokens = await handle.__ray_call__.remote(engine_activity)
                if running > 0 or time.monotonic() > deadline:
                    break
            os.kill(pid, signal.SIGKILL)
            killed.update(pid=pid, running=running, tokens=tokens)
        return await real_wait(self, ref, what, *args, **kw)

    monkeypatch.setattr(RolloutFleet, "wait", wait)
    run = tmp_path / "run"
    cfg, _ = parse(app_flags(run, warmup_cache, "--run.steps", str(STEPS), "--ray.temp_dir", ray_dir,
                             "--rollout.engine.slots", "2"))  # fmt: skip
    train(cfg)
    tally.schedule(faults=1)
    tally.note(
        f"injected: SIGKILL to rollouter 0 (pid {killed['pid']}) with {killed['running']} calls running; "
        f"checked restarts, reruns and every prompt index"
    )
    tally.check(killed["running"] > 0, "the rollouter was not generating when it was killed")
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "timing/train_s" in r]
    tally.check([r["step"] for r in rows] == list(range(1, STEPS + 1)), "the run did not finish every step")
    tally.check(rows[-1]["fault/rollouter_restarts"] == 1.0, f"restarts {rows[-1]['fault/rollouter_restarts']}")
    tally.check(rows[-1]["fault/prompts_rerun"] >= 1.0, "the killed rollouter's leased prompts were not rerun")
    trained = trained_prompt_indices(run, range(1, STEPS + 1))
    tally.check(len(trained) == len(set(trained)) == STEPS * PROMPTS_PER_STEP, f"trained twice or lost: {trained}")
    held = LedgerState.from_json_dict(json.loads((run / "checkpoints" / str(STEPS) / "ledger.json").read_text()))
    tally.check(sorted(trained + held.held) == list(range(held.cursor)), "a started prompt is neither trained nor held")


def test_a_killed_trainer_stops_the_driver_with_an_error_naming_the_trainer(
    tmp_path: Path, warmup_cache: Path, ray_dir: str, monkeypatch: pytest.MonkeyPatch, tally: FaultTally
) -> None:
    real_wait = RolloutFleet.wait
    killed: dict[str, float] = {}

    async def wait(self: RolloutFleet, ref: Any, what: str, *args: Any, **kw: Any) -> Any:
        if what == KILL_AT and not killed:
            (pid,) = descendant_pids("ray::TrainerActor")
            os.kill(pid, signal.SIGKILL)
            killed.update(pid=pid, at=time.monotonic())
        return await real_wait(self, ref, what, *args, **kw)

    monkeypatch.setattr(RolloutFleet, "wait", wait)
    cfg, _ = parse(app_flags(tmp_path / "run", warmup_cache, "--run.steps", str(STEPS), "--ray.temp_dir", ray_dir))
    with pytest.raises((ray.exceptions.RayError, RuntimeError)) as err:
        train(cfg)
    stopped_s = time.monotonic() - killed["at"]
    tally.schedule(faults=1)
    message = str(err.value)
    tally.note(
        f"injected: SIGKILL to the trainer actor (pid {int(killed['pid'])}); the driver stopped after "
        f"{stopped_s:.1f} s with {type(err.value).__name__}: {' '.join(message.split())[:240]}"
    )
    tally.check("TrainerActor" in message or "trainer" in message, f"the error does not name the trainer: {message}")
    tally.check(stopped_s < 60, f"the driver took {stopped_s:.0f} s to stop")
    tally.check(not ray.is_initialized(), "the app's Ray session was left running")
