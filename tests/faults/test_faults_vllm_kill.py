"""A vLLM server killed (SIGKILL to its process group) while it streams responses: every call in flight ends as a
counted `error` trajectory with the reason (never a hang, never a training sample), within seconds, and a call
made afterwards fails at once. Needs the vLLM environment (`scripts/setup_vllm_env.sh`): markers `faults` and
`vllm`."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from engine_adapters.vllm.server import default_python
from faults_apps import app_flags
from faults_tally import FaultTally
from moe_models import load_tokenizer
from rl_tasks.renderer import Renderer
from rollout_core import TrajectoryStatus
from rollout_core.server_engine_config import VLLMEngineConfig
from sync_ppo.cli import parse
from trainers.rollout.engine_site import EngineSite
from trainers.rollout.requests import GroupSpec, step_requests
from trainers.rollout.rollout import generate_all
from trainers.warmup import ensure_base_checkpoint

pytestmark = [
    pytest.mark.faults,
    pytest.mark.vllm,
    pytest.mark.skipif(not default_python().exists(), reason="vLLM environment absent: scripts/setup_vllm_env.sh"),
]

STOPPED_WITHIN_S = 30.0


def test_a_vllm_server_killed_mid_request_ends_every_call_as_a_counted_error_without_hanging(
    tmp_path: Path, warmup_cache: Path, tally: FaultTally
) -> None:
    cfg, _ = parse(app_flags(tmp_path / "run", warmup_cache))
    task = cfg.task.build()
    base = ensure_base_checkpoint(task, cfg.warmup, warmup_cache)
    renderer = Renderer(load_tokenizer(base.checkpoint_dir), task.prompt_format)  # type: ignore[arg-type]
    max_new = task.max_answer_chars + 1
    requests = step_requests(task.splits.train, GroupSpec(8, 4, 1.0, max_new, 0), 1)

    async def main() -> tuple[list[object], float, str]:
        site = EngineSite(str(base.checkpoint_dir), 256, 0, str(tmp_path / "engine"))
        rollout_engine = await VLLMEngineConfig(max_num_seqs=64).build(site)
        engine, server = rollout_engine, rollout_engine.server  # type: ignore[attr-defined]
        try:
            calls = asyncio.ensure_future(generate_all(engine, renderer, requests))
            while not any(engine.progress(r.request_id) for r in requests) and not calls.done():
                await asyncio.sleep(0.001)
            os.killpg(server.process.pid, signal.SIGKILL)  # the server this test launched, and its workers
            killed_at = time.monotonic()
            trajectories = await asyncio.wait_for(calls, STOPPED_WITHIN_S)
            stopped = time.monotonic() - killed_at
            (late,) = await asyncio.wait_for(generate_all(engine, renderer, requests[:1]), STOPPED_WITHIN_S)
            return trajectories, stopped, late.error or ""
        finally:
            await rollout_engine.close()

    trajectories, stopped, late_error = asyncio.run(main())
    tally.schedule(faults=1)
    errors = [t for t in trajectories if t.status is TrajectoryStatus.ERROR]  # type: ignore[attr-defined]
    tally.note(
        f"injected: SIGKILL to the vLLM server mid-stream; {len(errors)}/{len(trajectories)} calls ended as "
        f"errors after {stopped:.1f} s (e.g. {errors[0].error if errors else None}); a later call: {late_error}"  # type: ignore[attr-defined]
    )
    tally.check(len(errors) > 0, "no call was in flight when the server died")
    tally.check(
        all(t.status in (TrajectoryStatus.OK, TrajectoryStatus.ERROR) for t in trajectories),  # type: ignore[attr-defined]
        "a call in flight ended otherwise than ok (done before the kill) or error",
    )
    tally.check(all(t.error for t in errors), "an error trajectory without its reason")  # type: ignore[attr-defined]
    tally.check(stopped < STOPPED_WITHIN_S, f"the calls took {stopped:.0f} s to fail")
    tally.check(bool(late_error), "a call after the server died did not fail")
