"""A launched vLLM server's CPU priority (no vLLM needed: a sleeping Python process stands in for the server)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from engine_adapters.vllm import (
    SERVER_NICE,
    VLLMServer,
    VLLMServerConfig,
    VLLMServerError,
    cpu_priority,
    lower_cpu_priority,
)

# after 1 s (once the parent has set its priority), prints its own nice and that of a child it starts then
REPORTS_NICE = (
    "import os, subprocess, sys, time\n"
    "time.sleep(1.0)\n"
    "child = subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'], capture_output=True, text=True)\n"
    "print(os.nice(0), child.stdout.strip(), flush=True)\n"
    "time.sleep(30)\n"
)


@pytest.fixture
def start_session() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Starts REPORTS_NICE in a new session, as a server is started; kills every process it started."""
    started: list[subprocess.Popen[str]] = []

    def start(preexec_nice: int = 0) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", REPORTS_NICE],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=(lambda: os.nice(preexec_nice)) if preexec_nice else None,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def _reported(proc: subprocess.Popen[str]) -> list[int]:
    assert proc.stdout is not None
    return [int(x) for x in proc.stdout.readline().split()]


def _autogroup_nice(pid: int) -> int | None:
    """None where the kernel has no session autogroups (no file) or has them switched off (an empty file)."""
    path = Path(f"/proc/{pid}/autogroup")
    fields = path.read_text().split() if path.exists() else []
    return int(fields[-1]) if fields else None


def test_lower_cpu_priority_sets_the_process_its_later_children_and_its_session(start_session) -> None:
    mine, my_group = os.nice(0), _autogroup_nice(os.getpid())
    proc = start_session()
    has_autogroup = _autogroup_nice(proc.pid) is not None
    lower_cpu_priority(proc.pid, 10)
    assert os.getpriority(os.PRIO_PROCESS, proc.pid) == 10
    assert _reported(proc) == [10, 10]  # a child started afterwards (vLLM's engine core, worker) inherits it
    if has_autogroup:  # Linux with session autogroups: the new session's group, not the caller's
        assert _autogroup_nice(proc.pid) == 10
    assert (os.nice(0), _autogroup_nice(os.getpid())) == (mine, my_group)


def test_lower_cpu_priority_never_lowers_a_nice_value(start_session) -> None:
    proc = start_session(preexec_nice=15)
    lower_cpu_priority(proc.pid, 10)
    assert os.getpriority(os.PRIO_PROCESS, proc.pid) == 15


def test_nice_zero_leaves_the_process_as_it_is(start_session) -> None:
    proc = start_session()
    lower_cpu_priority(proc.pid, 0)
    assert os.getpriority(os.PRIO_PROCESS, proc.pid) == os.nice(0)


@pytest.mark.parametrize("content", ["", "\n"])
def test_an_empty_autogroup_file_means_autogroups_are_off_and_only_the_process_nice_is_raised(
    start_session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str
) -> None:
    # kernels booted with `noautogroup` keep the file but print nothing into it (seen on a CI machine)
    proc = start_session()
    (tmp_path / str(proc.pid)).mkdir()
    (tmp_path / str(proc.pid) / "autogroup").write_text(content)
    monkeypatch.setattr(cpu_priority, "PROC", tmp_path)
    lower_cpu_priority(proc.pid, 10)
    assert os.getpriority(os.PRIO_PROCESS, proc.pid) == 10
    assert (tmp_path / str(proc.pid) / "autogroup").read_text() == content


def test_a_process_gone_before_its_autogroup_is_set_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_priority, "PROC", tmp_path)  # no folder for the pid: it has exited
    with pytest.raises(ProcessLookupError, match="exited before its CPU priority was set"):
        cpu_priority._raise_autogroup_nice(os.getpid(), 10)


@pytest.mark.parametrize("nice", [-1, 20, 2.5, True])
def test_nice_outside_0_to_19_is_rejected(nice: object) -> None:
    with pytest.raises(ValueError, match=r"nice: expected an int in 0\.\.19"):
        lower_cpu_priority(os.getpid(), nice)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"nice: expected an int in 0\.\.19"):
        VLLMServerConfig(model="/m", python=Path("/py"), nice=nice)  # type: ignore[arg-type]


def test_a_server_process_we_own_runs_at_server_nice(start_session) -> None:
    proc = start_session()
    server = VLLMServer("http://127.0.0.1:1", process=proc)  # type: ignore[arg-type]
    try:
        assert SERVER_NICE == 10 and os.getpriority(os.PRIO_PROCESS, proc.pid) == SERVER_NICE
    finally:
        server.stop()
    assert proc.poll() is not None


def test_a_server_that_already_exited_is_not_an_error_here() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    server = VLLMServer("http://127.0.0.1:1", process=proc)  # type: ignore[arg-type]
    with pytest.raises(VLLMServerError, match="exited with code 0"):  # wait_healthy reports the exit, with the log
        server.wait_healthy(5.0)
    server.stop()
