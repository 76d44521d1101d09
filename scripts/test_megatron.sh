#!/usr/bin/env bash
# Build the Megatron-Core environment and run the `megatron`-marked tests in it.
#
# megatron-core 0.19.2 requires Python >= 3.12 while the workspace supports >= 3.11, so the workspace's `megatron`
# dependency group is synced into its own folder, .megatron-env/ (git-ignored), from the same uv.lock, with the
# first Python >= 3.12 found: $MEGATRON_PYTHON, python3.13 / python3.12 on PATH, pyenv's versions, then uv's own
# interpreters (`uv python find`). uv does not look in pyenv's folders by itself, and this project never downloads
# an interpreter. Idempotent: `uv sync` is a no-op when nothing changed.
#
#   bash scripts/test_megatron.sh              # build (if needed) and run the megatron tests
#   bash scripts/test_megatron.sh --build-only # build only
#   bash scripts/test_megatron.sh -k parity    # extra arguments go to pytest
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

usable() {  # a runnable interpreter of Python >= 3.12
    [[ -n "$1" ]] && "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1
}

find_python() {
    local candidates=("${MEGATRON_PYTHON:-}")
    for name in python3.13 python3.12; do
        candidates+=("$(command -v "$name" 2>/dev/null || true)")
    done
    local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
    for dir in "$pyenv_root"/versions/3.1[2-9]* "$pyenv_root"/versions/3.[2-9][0-9]*; do
        [[ -x "$dir/bin/python3" ]] && candidates+=("$dir/bin/python3")
    done
    candidates+=("$(uv python find --no-python-downloads '>=3.12' 2>/dev/null || true)")
    for p in "${candidates[@]}"; do
        if usable "$p"; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

if ! python="$(find_python)"; then
    echo "[test_megatron] no Python >= 3.12 found (megatron-core 0.19.2 needs one): set MEGATRON_PYTHON to its path" >&2
    exit 1
fi
export UV_PROJECT_ENVIRONMENT="$repo_root/.megatron-env"
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}"
start_s=$(date +%s)
uv sync --locked --no-default-groups --group megatron --python "$python"
echo "[test_megatron] .megatron-env ready ($("$UV_PROJECT_ENVIRONMENT/bin/python" --version)) in $(( $(date +%s) - start_s )) s"
if [[ "${1:-}" == "--build-only" ]]; then
    exit 0
fi
uv run --no-sync pytest -m "megatron and not gpu" -p no:cacheprovider tests/trainers tests/sync_ppo tests/async_ppo "$@"
