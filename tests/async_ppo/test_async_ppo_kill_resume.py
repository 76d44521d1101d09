"""`kill -9` of the whole app right after a checkpoint, then `--resume`: no prompt lost, none trained twice, the
checkpoint step's validation kept, one metrics line per step in step order."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from async_pipeline.ledger import LedgerState
from async_ppo_helpers import TINY, trained_prompt_indices
from run_lifecycle import read_metrics

pytestmark = pytest.mark.slow

APP = Path(__file__).resolve().parents[2] / "apps" / "async_ppo"
STEPS = 12


def _start(flags: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(APP), *flags], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _kill_everything(proc: subprocess.Popen[bytes], ray_dir: str) -> None:
    """SIGKILL to the app's process group and to every Ray process of its session (they live in other groups)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    subprocess.run(["pkill", "-9", "-f", ray_dir], check=False)
    time.sleep(1.0)
    shutil.rmtree(ray_dir, ignore_errors=True)  # a kill -9 leaves the app no chance to remove it


def test_kill_9_then_resume_trains_every_prompt_exactly_once(tmp_path: Path, warmup_cache: Path) -> None:
    run, log = tmp_path / "run", tmp_path / "app.log"
    ray_dir = f"/tmp/apk_{uuid.uuid4().hex[:8]}"
    flags = [*TINY, "--run.warmup_cache", str(warmup_cache), "--run.dir", str(run), "--run.steps", str(STEPS),
             "--run.checkpoint_every", "2", "--ray.temp_dir", ray_dir]  # fmt: skip
    proc = _start(flags, log)
    deadline = time.monotonic() + 240
    while not (run / "checkpoints" / "2" / "COMPLETE").exists():
        assert proc.poll() is None, f"the app exited early ({proc.returncode}):\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no checkpoint 2 within 240 s:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)
    _kill_everything(proc, ray_dir)
    killed_at = max(int(p.name) for p in (run / "checkpoints").iterdir() if (p / "COMPLETE").exists())
    assert killed_at < STEPS, "the run finished before the kill: nothing was interrupted"
    carried = LedgerState.from_json_dict(json.loads((run / "checkpoints" / str(killed_at) / "ledger.json").read_text()))
    assert carried.held, "the checkpoint should carry queued or in-flight prompts"

    resumed = _start(["--resume", "--run.dir", str(run), "--ray.temp_dir", ray_dir + "r"], log)
    assert resumed.wait(timeout=300) == 0, log.read_text()[-3000:]

    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(STEPS + 1))  # one line per step, in order, none twice
    assert all("timing/train_s" in r for r in rows[1:])  # rows after the checkpoint were truncated, then rewritten
    validated = list(range(0, STEPS + 1, 2))  # validation.every_steps 2: the killed checkpoint's step included
    assert [r["step"] for r in rows if "val/greedy_acc" in r] == validated
    assert sorted(int(p.stem) for p in (run / "validation").glob("*.jsonl")) == validated
    trained = trained_prompt_indices(run, 4, range(1, STEPS + 1))
    assert len(trained) == len(set(trained)) == 4 * STEPS
    final = LedgerState.from_json_dict(json.loads((run / "checkpoints" / str(STEPS) / "ledger.json").read_text()))
    assert sorted(trained + final.held) == list(range(final.cursor))
    assert set(carried.held) <= set(trained) | set(final.held)  # every carried prompt was trained or still held
