"""Run directories: allocation is atomic (runs started in the same second get their own folder) and a live run's
lock keeps every other process out, released whenever the holder exits (a kill -9 included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from run_lifecycle import RunLock, allocate_run_dir

HOLD = (
    "import sys, time; from pathlib import Path; from run_lifecycle import RunLock; "
    "RunLock.acquire(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
)


def test_runs_allocated_in_the_same_second_get_distinct_directories(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:
        dirs = list(pool.map(lambda _: allocate_run_dir(tmp_path, "20261201-080000"), range(8)))
    assert len(set(dirs)) == 8 and all(d.is_dir() and not any(d.iterdir()) for d in dirs)
    assert sorted(d.name for d in dirs)[:2] == ["20261201-080000", "20261201-080000-1"]


def test_a_second_process_cannot_take_a_live_runs_directory_and_can_after_a_kill(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match=rf"pid {holder.pid}"):
            RunLock.acquire(tmp_path)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        deadline = time.monotonic() + 5
        while True:  # the kernel drops the lock with the dead process's descriptors
            try:
                lock = RunLock.acquire(tmp_path)
                break
            except ValueError:
                assert time.monotonic() < deadline, "the lock outlived its holder"
                time.sleep(0.05)
        lock.release()
    finally:
        holder.kill()
