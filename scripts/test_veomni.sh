#!/usr/bin/env bash
# Build the VeOmni environment and run the `veomni`-marked tests in it (the VeOmni training backend).
#
# VeOmni 0.1.12 runs only with transformers 5.9.0 and packaging < 26, which the default environment does not have,
# so the workspace's `veomni` dependency group (it conflicts with `dev`) is synced into its own folder,
# .veomni-env/ (git-ignored), from the same uv.lock. Idempotent: `uv sync` is a no-op when nothing changed.
#
#   bash scripts/test_veomni.sh              # build (if needed) and run the veomni tests
#   bash scripts/test_veomni.sh --build-only # build only
#   bash scripts/test_veomni.sh -k parity    # extra arguments go to pytest
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
export UV_PROJECT_ENVIRONMENT="$repo_root/.veomni-env"
export RAY_ENABLE_UV_RUN_RUNTIME_ENV=0
export VEOMNI_VERBOSITY="${VEOMNI_VERBOSITY:-WARNING}"
start_s=$(date +%s)
uv sync --locked --no-default-groups --group veomni
echo "[test_veomni] .veomni-env ready in $(( $(date +%s) - start_s )) s"
if [[ "${1:-}" == "--build-only" ]]; then
    exit 0
fi
uv run --no-sync pytest -m "veomni and not gpu" -p no:cacheprovider tests/trainers tests/sync_ppo tests/async_ppo "$@"
