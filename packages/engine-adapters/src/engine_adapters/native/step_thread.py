"""StepThread: the one thread that runs an engine's model steps and weight loads, at a torch thread count of its own.

Under OpenMP (torch's CPU backend) the intra-op thread count belongs to each OS thread: every thread that starts a
parallel region gets a team of its own, sized by its own count. A thread adopts the process's count
(`torch.set_num_threads`, last call wins) at its first torch op. So an engine decoding in a worker thread of a
process that trains at 2 threads ran two teams of 2 on a 2-core machine, and both sides lost: the decode and the
train step each ran slower than with the step thread at 1 (the teams spin while they wait for cores).

Invariants: the step thread's count is `torch_threads` from its start on; the count other threads adopt stays the
process's (pinning restores it, see `_pin`); calls run one at a time, in submission order.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")


def _pin(torch_threads: int | None) -> None:
    """Gives the calling thread `torch_threads` intra-op threads (None: it keeps the process's count).

    `torch.set_num_threads` also sets the count that threads adopt at their first torch op; a short-lived thread
    sets that back to the process's count, so threads started later (a teacher's scoring pool, say) are not
    pinned too."""
    process = torch.get_num_threads()  # this thread's first torch call: it adopts the process's count here
    if torch_threads is None or torch_threads == process:
        return
    torch.set_num_threads(torch_threads)
    restore = threading.Thread(target=torch.set_num_threads, args=(process,), name="native-engine-unpin")
    restore.start()
    restore.join()


class StepThread:
    """A single worker thread whose torch thread count is `torch_threads` (None: the process's). It ends once the
    `StepThread` is garbage (an idle thread holds no reference to it)."""

    def __init__(self, torch_threads: int | None) -> None:
        if torch_threads is not None and (
            isinstance(torch_threads, bool) or not isinstance(torch_threads, int) or torch_threads < 1
        ):
            raise ValueError(f"StepThread: expected None or an int >= 1 torch threads, got {torch_threads!r}")
        self.torch_threads = torch_threads
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="native-engine-step", initializer=_pin, initargs=(torch_threads,)
        )

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on the step thread; the caller's event loop stays free meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
