"""SIGTERM to a running async app ends it as Ctrl-C does: its cleanup runs, so the local Ray's processes and temp
directory are gone and the run directory's lock is free (a SIGTERM used to skip every `finally`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from async_ppo_helpers import TINY
from run_lifecycle import RunLock, read_metrics

pytestmark = pytest.mark.slow

APP = Path(__file__).resolve().parents[2] / "apps" / "async_ppo"


def test_sigterm_mid_run_removes_the_ray_temp_dir_and_frees_the_run_directory(
    tmp_path: Path, warmup_cache: Path
) -> None:
    run, ray_dir = tmp_path / "run", f"/tmp/aps_{uuid.uuid4().hex[:8]}"
    flags = [*TINY, "--run.warmup_cache", str(warmup_cache), "--run.dir", str(run), "--run.steps", "40",
             "--ray.temp_dir", ray_dir]  # fmt: skip
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    proc = subprocess.Popen(
        [sys.executable, str(APP), *flags], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while not any(r["step"] >= 1 for r in read_metrics(run / "metrics.jsonl")):
            assert proc.poll() is None and time.monotonic() < deadline, "the app did not reach step 1"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert not Path(ray_dir).exists(), f"{ray_dir} outlived the app"
    leftover = subprocess.run(["pgrep", "-f", ray_dir], capture_output=True, text=True).stdout.split()
    assert not leftover, f"Ray processes of the run outlived it: {leftover}"
    RunLock.acquire(run).release()  # the lock died with the app
