"""SIGTERM as an ordinary exit: the run's `finally` blocks (checkpoint staging, Ray shutdown, engine servers) run on
`kill` as they do on an error. A library may install its own handler (`ray.init` does, and it skips every
cleanup), so a process calls `exit_on_sigterm` again after it."""

from __future__ import annotations

import signal


def exit_on_sigterm() -> None:
    """SIGTERM raises SystemExit(143) in the main thread from now on."""
    signal.signal(signal.SIGTERM, _exit)


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
