"""A local Ray's start and end, each in a child process that opens `RaySession` as the app does (each needs its
own node: they stall its start or end it early): the node start waits ray.node_startup_timeout_s (a raylet held
stopped with SIGSTOP stands in for a loaded machine) and fails naming that setting; whatever the way out (close,
an uncaught error before close, a failed start, a failed reservation) no process of the node is left and its temp
dir is gone unless ray.keep_temp_dir (an existing dir loses only the run's session entries)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CHILD = r"""
import json, os, signal, sys, threading, time
from async_pipeline.ray_session.config import RayConfig
from async_pipeline.ray_session.session import RaySession

spec = json.loads(sys.argv[1])
cfg = RayConfig(**spec["ray"])


def stall_raylet(seconds):
    # SIGSTOP this node's raylet as soon as it exists (before it registers with the GCS), SIGCONT after `seconds`
    while True:
        for proc in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = open(f"/proc/{proc}/cmdline", "rb").read()
            except OSError:
                continue
            if cmd.split(b"\0")[0].endswith(b"/raylet") and cfg.temp_dir.encode() in cmd:
                os.kill(int(proc), signal.SIGSTOP)
                print(json.dumps({"stopped_raylet": int(proc)}), flush=True)
                time.sleep(seconds)
                try:
                    os.kill(int(proc), signal.SIGCONT)
                except ProcessLookupError:
                    pass
                return
        time.sleep(0.005)


if spec["stall_s"]:
    threading.Thread(target=stall_raylet, args=(spec["stall_s"],), daemon=True).start()
t0 = time.monotonic()
try:
    session = RaySession.open(cfg)
except RuntimeError as e:
    print(json.dumps({"error": str(e), "after_s": time.monotonic() - t0}), flush=True)
    sys.exit(3)
print(json.dumps({"opened_after_s": time.monotonic() - t0}), flush=True)
if spec["crash"]:
    raise RuntimeError("an error before the pipeline's try: close is never called")
session.close()
"""


def _run_child(ray_flags: dict[str, Any], *, stall_s: float = 0.0, crash: bool = False) -> tuple[int, dict, str]:
    """Exit code, the child's last JSON line, its stderr tail."""
    spec = json.dumps({"ray": ray_flags, "stall_s": stall_s, "crash": crash})
    # RAY_AUTH_MODE set (as it is in any process after its first Ray session) makes ray's C++ config read the
    # environment at import, before the session sets its startup waits: the harder case for node_startup_timeout_s
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", RAY_AUTH_MODE="token")
    out = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, text=True, env=env, timeout=400)
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    assert lines, f"the child printed nothing (exit {out.returncode}):\n{out.stderr[-3000:]}"
    return out.returncode, lines[-1], out.stderr[-3000:]


def _processes_of(temp: Path) -> list[str]:
    """Command lines of the processes (this one excluded) that name `temp` or hold a file open under it."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        targets = []
        for fd in fds:
            try:
                targets.append(os.readlink(fd))
            except OSError:
                continue
        if str(temp) in cmd or any(t.startswith(str(temp)) for t in targets):
            found.append(f"{proc.name}: {cmd[:160]}")
    return found


def _temp() -> Path:
    return Path(f"/tmp/aprt_{uuid.uuid4().hex[:8]}")  # short: Ray's socket paths under it must fit AF_UNIX's 107 bytes


SMALL = {"trainer_cpus": 0.25, "rollouter_cpus": 0.25}


def test_a_raylet_slower_than_rays_30_s_default_is_waited_for_and_an_existing_temp_dir_keeps_its_files() -> None:
    temp = _temp()
    temp.mkdir()
    (temp / "mine.txt").write_text("not Ray's")
    try:
        code, last, err = _run_child({**SMALL, "temp_dir": str(temp), "node_startup_timeout_s": 100}, stall_s=45)
        assert code == 0 and last["opened_after_s"] >= 45, (last, err)
        assert sorted(os.listdir(temp)) == ["mine.txt"]  # the session dir and session_latest are gone
        assert not _processes_of(temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_a_node_start_past_node_startup_timeout_s_fails_naming_the_setting_and_leaves_no_process_or_dir() -> None:
    temp = _temp()
    try:
        code, last, err = _run_child({**SMALL, "temp_dir": str(temp), "node_startup_timeout_s": 30}, stall_s=90)
        assert code == 3, (last, err)
        assert "ray.node_startup_timeout_s = 30 s" in last["error"] and last["after_s"] < 90, last  # raylet stopped
        assert not _processes_of(temp)  # Ray itself leaves its GCS and raylet running after this error
        assert not temp.exists()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_an_uncaught_error_before_close_still_ends_the_node_and_removes_its_temp_dir() -> None:
    temp = _temp()
    try:
        code, last, err = _run_child({**SMALL, "temp_dir": str(temp)}, crash=True)
        assert code == 1 and "opened_after_s" in last and "close is never called" in err, (last, err)
        assert not _processes_of(temp)
        assert not temp.exists()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_keep_temp_dir_keeps_the_session_files_after_a_failed_reservation_but_no_process() -> None:
    temp = _temp()
    try:
        flags = {"temp_dir": str(temp), "keep_temp_dir": True, "rollouter_cpus": 64.0, "startup_timeout_s": 1.0}
        code, last, _ = _run_child(flags)
        assert code == 3 and "could not reserve" in last["error"], last
        sessions = [p for p in temp.iterdir() if p.name.startswith("session_2")]
        assert len(sessions) == 1 and (sessions[0] / "logs" / "raylet.out").is_file()
        assert not _processes_of(temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
