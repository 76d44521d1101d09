"""ServerGuard: makes an engine server's whole process tree die with the rollouter that started it.

Run by the *server's* interpreter (standard library only), as the first process of a new session:

    <python> server_guard.py <rollouter pid> <program> <args...>

It (1) asks the kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG; the "parent" is the rollouter's thread
that started it, which lives as long as the actor's event loop), (2) forks a watcher, and (3) becomes `program`
(exec keeps the pid, the session and the parent-death signal). The watcher polls its parent, the server: once the
server is gone (it got the parent-death SIGTERM, or Ray SIGKILLed it as the dying actor's child, or it crashed),
the watcher SIGTERMs, then SIGKILLs the session's process group, itself included. That covers the grandchildren
(vLLM's engine core) that nothing else would stop: they ignore their parent's death.

Invariants: the server's pid is the guard's pid (callers wait on and signal it as the server); the watcher is in
the server's process group, so `VLLMServer.stop` (killpg) also ends it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
POLL_S = 0.5
TERM_GRACE_S = 5.0


def _watch(server_pid: int) -> None:
    """The watcher's whole life: wait for the server to go, then end the process group. Never returns."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is for the server's children, not for us
    while os.getppid() == server_pid:
        time.sleep(POLL_S)
    group = os.getpgid(0)
    os.killpg(group, signal.SIGTERM)  # vLLM's engine core shuts down cleanly (shared memory) on SIGTERM
    time.sleep(TERM_GRACE_S)
    os.killpg(group, signal.SIGKILL)
    os._exit(0)  # not reached: SIGKILL above includes this process


def main(argv: list[str]) -> None:
    if len(argv) < 3 or not argv[1].isdigit():
        sys.exit(f"server_guard: expected <rollouter pid> <program> [args...], got {argv[1:]!r}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        sys.exit(f"server_guard: prctl(PR_SET_PDEATHSIG) failed with errno {ctypes.get_errno()}")
    if os.getppid() != int(argv[1]):
        sys.exit(f"server_guard: the rollouter (pid {argv[1]}) exited before the server started")
    server_pid = os.getpid()
    if os.fork() == 0:
        _watch(server_pid)
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv)
