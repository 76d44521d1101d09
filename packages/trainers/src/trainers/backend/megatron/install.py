"""Whether this environment can run the Megatron-Core backend, without importing Megatron (the driver process
checks before it spawns ranks)."""

from __future__ import annotations

import sys

MEGATRON_VERSION = "0.19.2"  # what the `megatron` dependency group pins
SETUP_HINT = (
    "build its environment (Python >= 3.12) with `bash scripts/test_megatron.sh --build-only`, then run the app in "
    "it: `UV_PROJECT_ENVIRONMENT=.megatron-env uv run --no-sync apps/sync_ppo --backend.kind megatron`"
)


def check_installed() -> None:
    """Raises, naming the fix, unless this environment has the pinned megatron-core (on Python >= 3.12)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        got = version("megatron-core")
    except PackageNotFoundError:
        got = "not installed"
    if got != MEGATRON_VERSION:
        python = sys.version.split()[0]
        raise ValueError(
            f"backend.kind megatron: expected megatron-core {MEGATRON_VERSION}, got {got} on Python "
            f"{python} (the default install has no Megatron-Core); {SETUP_HINT}"
        )
