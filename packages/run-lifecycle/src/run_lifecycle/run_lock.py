"""One process per run directory: fresh run directories are allocated atomically, and a running app holds an
exclusive lock on its run directory, so a second process can never write into a live run.

- `allocate_run_dir(root, stamp)`: `root/<stamp>`, or `root/<stamp>-1`, `-2`, ... when taken: `os.mkdir` either
  creates the folder or fails, so two runs started in the same second get two folders.
- `RunLock.acquire(run_dir)`: an `fcntl.flock` on `<run_dir>/.lock` (the holder's pid written in it), released when
  the process exits, however it exits (the kernel drops the lock with the file descriptor): a `kill -9` never
  leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"
MAX_SUFFIX = 10_000


def allocate_run_dir(root: Path, stamp: str) -> Path:
    """Creates and returns a new, empty run directory under `root` named after `stamp`."""
    root.mkdir(parents=True, exist_ok=True)
    for n in range(MAX_SUFFIX):
        path = root / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise ValueError(f"allocate_run_dir: expected a free name {stamp}[-n] under {root}, got {MAX_SUFFIX} taken")


class RunLock:
    """Held for the life of the process that owns the run directory (`release` drops it early)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, run_dir: Path) -> RunLock:
        """Raises ValueError naming the holder's pid when another live process holds the run directory."""
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ValueError(
                f"run directory {run_dir}: expected no other process using it, got one running (pid {holder}); "
                "wait for it to finish or choose another --run.dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = -1
