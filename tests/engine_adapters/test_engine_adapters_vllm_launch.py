"""VLLMServer command line, environment and failure reporting (no vLLM needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_adapters.vllm import EXTENSION_CLS, EXTENSION_DIR, VLLMServer, VLLMServerConfig, VLLMServerError


def test_cpu_capture_command_disables_prefix_caching_and_loads_the_extension() -> None:
    cfg = VLLMServerConfig(model="/m", python=Path("/py"))
    cmd = cfg.command(1234)
    assert cmd[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    for flag in ("--enable-scale-out", "--no-enable-prefix-caching", "--enforce-eager", "--no-enable-chunked-prefill"):
        assert flag in cmd
    assert int(cmd[cmd.index("--max-num-batched-tokens") + 1]) >= cfg.max_model_len  # whole prefills fit
    assert cmd[cmd.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert cmd[cmd.index("--worker-extension-cls") + 1] == EXTENSION_CLS
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "1234"
    native = VLLMServerConfig(model="/m", python=Path("/py"), routing="native", enforce_eager=False).command(1)
    assert "--enable-return-routed-experts" in native and "--no-enable-prefix-caching" not in native


def test_environment_enables_dev_mode_and_finds_the_extension() -> None:
    env = VLLMServerConfig(model="/m", python=Path("/py"), kv_cache_gib=2).environment()
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(EXTENSION_DIR)
    assert (EXTENSION_DIR / (EXTENSION_CLS.split(".")[0] + ".py")).exists()


def test_extension_module_imports_nothing_from_this_package() -> None:
    source = (EXTENSION_DIR / "moe_rl_vllm_ext.py").read_text()
    assert "engine_adapters" not in source.replace("import engine_adapters", "").split('"""', 2)[2]
    assert "import engine_adapters" not in source and "from engine_adapters" not in source


def test_launch_failure_reports_the_server_log_tail() -> None:
    # this interpreter has no vllm: the child exits at once and its traceback must reach the error message
    cfg = VLLMServerConfig(model="/nonexistent", python=Path(sys.executable), startup_timeout_s=60)
    with pytest.raises(VLLMServerError, match="No module named 'vllm'"):
        VLLMServer.launch(cfg)


def test_missing_interpreter_says_how_to_build_it() -> None:
    with pytest.raises(VLLMServerError, match=r"setup_vllm_env\.sh"):
        VLLMServer.launch(VLLMServerConfig(model="/m", python=Path("/no/such/python")))


def test_importing_the_package_never_imports_torch_vllm_or_sglang() -> None:
    code = "import sys, engine_adapters; print(sorted(m for m in ('torch', 'vllm', 'sglang') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
