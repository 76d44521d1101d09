"""Whether this environment can run the VeOmni backend, without importing VeOmni (the driver process checks before
it spawns ranks)."""

from __future__ import annotations

VEOMNI_VERSION, TRANSFORMERS_VERSION = "0.1.12", "5.9.0"  # the pair the `veomni` dependency group pins
SETUP_HINT = (
    "build its environment with `bash scripts/test_veomni.sh --build-only`, then run the app in it: "
    "`UV_PROJECT_ENVIRONMENT=.veomni-env uv run --no-sync apps/sync_ppo --backend.kind veomni`"
)


def check_installed() -> None:
    """Raises, naming the fix, unless this environment has VeOmni with the transformers release it runs with."""
    from importlib.metadata import PackageNotFoundError, version

    got = {}
    for name in ("veomni", "transformers"):
        try:
            got[name] = version(name)
        except PackageNotFoundError:
            got[name] = "not installed"
    if (got["veomni"], got["transformers"]) != (VEOMNI_VERSION, TRANSFORMERS_VERSION):
        raise ValueError(
            f"backend.kind veomni: expected veomni {VEOMNI_VERSION} with transformers "
            f"{TRANSFORMERS_VERSION}, got veomni {got['veomni']} with transformers "
            f"{got['transformers']} (the default install has no VeOmni); {SETUP_HINT}"
        )
