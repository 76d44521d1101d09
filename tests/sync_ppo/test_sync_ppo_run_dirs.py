"""Two runs started at the same moment without --run.dir get a run directory each (they used to share one and
overwrite each other's metrics, rollouts and checkpoints)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from run_lifecycle import read_metrics
from sync_ppo_helpers import TINY, TOY_TASK

pytestmark = pytest.mark.slow

APP = Path(__file__).resolve().parents[2] / "apps" / "sync_ppo"


def test_two_runs_started_together_get_their_own_run_directories(tmp_path: Path, warmup_cache: Path) -> None:
    flags = [*TINY, *TOY_TASK, "--rollout.engine.slots", "16", "--run.warmup_cache", str(warmup_cache),
             "--run.steps", "1", "--run.plots", "false"]  # fmt: skip
    procs = [
        subprocess.Popen(
            [sys.executable, str(APP), *flags],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = sorted((tmp_path / "runs" / "sync_ppo").iterdir())
    assert len(runs) == 2, runs
    for run in runs:
        assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [0, 1]
