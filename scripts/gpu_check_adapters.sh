#!/usr/bin/env bash
# Engine-adapter checks for a machine with a CUDA GPU (NOT run on the CPU machines; nothing here is mocked).
#
# 1. vLLM: the whole vLLM test module (engine contract, reload == fresh server, routing rows == transformers'
#    router top-k, resume across updates) against a CUDA vLLM server with vLLM's OWN routed-expert capture
#    (--enable-return-routed-experts, ENGINE_ADAPTERS_VLLM_ROUTING=native).
#    Needs a vLLM environment with plain `vllm`:  VLLM_PACKAGE=vllm scripts/setup_vllm_env.sh
#    (or VLLM_PYTHON=/path/to/python of an existing install).
# 2. SGLang, when SGLANG_PYTHON (default: .sglang-env/bin/python) can import sglang: launches
#    `python -m sglang.launch_server` on a tiny checkpoint with --enable-return-routed-experts and runs the
#    engine contract (tests/engine_adapters/test_engine_adapters_sglang_real.py) against it.
#
# Usage: scripts/gpu_check_adapters.sh          (from the repository root; results in stdout, exit code != 0 on failure)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
status=0

echo "== vLLM on GPU (native routed experts)"
export VLLM_PYTHON="${VLLM_PYTHON:-$repo_root/.vllm-env/bin/python}"
if [[ -x "$VLLM_PYTHON" ]] && "$VLLM_PYTHON" -c "import vllm" 2>/dev/null; then
    ENGINE_ADAPTERS_VLLM_ROUTING=native uv run pytest tests/engine_adapters/test_engine_adapters_vllm_server.py \
        -m vllm -q -p no:cacheprovider || status=1
else
    echo "SKIPPED: no importable vllm at $VLLM_PYTHON (VLLM_PACKAGE=vllm scripts/setup_vllm_env.sh)"
    status=1
fi

echo "== SGLang on GPU"
sglang_python="${SGLANG_PYTHON:-$repo_root/.sglang-env/bin/python}"
if [[ -x "$sglang_python" ]] && "$sglang_python" -c "import sglang" 2>/dev/null; then
    work="$(mktemp -d)"
    uv run python - "$work" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "tests/engine_adapters")
from engine_adapters_tiny_moe import save_checkpoint
root = Path(sys.argv[1])
save_checkpoint(root / "v0", 0)
save_checkpoint(root / "v1", 1)
PY
    port="$(uv run python -c 'from engine_adapters.vllm.server import free_port; print(free_port())')"
    "$sglang_python" -m sglang.launch_server --model-path "$work/v0" --host 127.0.0.1 --port "$port" \
        --enable-return-routed-experts --dtype float32 --context-length 1024 > "$work/sglang.log" 2>&1 &
    sglang_pid=$!
    trap 'kill "$sglang_pid" 2>/dev/null || true' EXIT
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
        kill -0 "$sglang_pid" 2>/dev/null || { tail -40 "$work/sglang.log"; exit 1; }
        sleep 1
    done
    ENGINE_ADAPTERS_SGLANG_URL="http://127.0.0.1:$port" ENGINE_ADAPTERS_SGLANG_MODEL="$work/v0" \
    ENGINE_ADAPTERS_SGLANG_UPDATE_DIR="$work/v1" \
        uv run pytest tests/engine_adapters/test_engine_adapters_sglang_real.py -m gpu -q -p no:cacheprovider \
        || status=1
else
    echo "SKIPPED: no importable sglang at $sglang_python"
fi
exit $status
