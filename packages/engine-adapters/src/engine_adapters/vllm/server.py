"""VLLMServer: one vLLM OpenAI-compatible API server process, launched from vLLM's own interpreter.

vLLM lives in a separate environment (`scripts/setup_vllm_env.sh` builds `.vllm-env/`), so the server is a child
process speaking HTTP on 127.0.0.1. Invariants:
- the server runs in its own session (process group); `stop()`, interpreter exit and fixture finalizers kill
  the whole group, so no engine-core or worker process outlives its owner;
- `start()` returns only once `/health` answers 200; otherwise it raises `VLLMServerError` carrying the last
  lines of the server's log;
- with `model_type` set, the command carries what vLLM needs for that family's transformers-written checkpoint
  (`rollout_core.vllm_families`);
- our worker extension (`worker_ext/moe_rl_vllm_ext.py`) is always loaded; with `routing="extension"` (the CPU
  path) prefix caching is off and the model runs eagerly, which the extension's router capture needs;
- a server process we own runs at nice `nice` (default `SERVER_NICE`), its session's autogroup too: vLLM's
  busy-waiting engine core and worker would otherwise starve every other process while it generates, its
  client included (see `cpu_priority`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx
from rollout_core.vllm_families import VLLM_FAMILIES

from engine_adapters.vllm.cpu_priority import SERVER_NICE, check_nice, lower_cpu_priority

EXTENSION_DIR = Path(__file__).resolve().parent / "worker_ext"
EXTENSION_CLS = "moe_rl_vllm_ext.RolloutWorkerExtension"
RoutingSource = Literal["extension", "native", "none"]


class VLLMServerError(RuntimeError):
    """The vLLM server did not start, died, or could not be stopped."""


def default_python() -> Path:
    """`$VLLM_PYTHON`, else `.vllm-env/bin/python` in the current directory or its nearest parent that has one."""
    env = os.environ.get("VLLM_PYTHON")
    if env:
        return Path(env)
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        candidate = folder / ".vllm-env" / "bin" / "python"
        if candidate.exists():
            return candidate
    return here / ".vllm-env" / "bin" / "python"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class VLLMServerConfig:
    """How to launch the server. `model` is a local HF-format folder (config, safetensors, tokenizer)."""

    model: str
    python: Path = field(default_factory=default_python)
    routing: RoutingSource = "extension"  # extension: CPU router hook; native: --enable-return-routed-experts
    dtype: str = "float32"
    max_model_len: int = 1024
    max_num_seqs: int = 64
    kv_cache_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE in whole GiB (CPU only)
    enforce_eager: bool = True
    seed: int = 0
    served_model_name: str = "policy"
    startup_timeout_s: float = 600.0
    nice: int = SERVER_NICE  # CPU priority of the server's session and processes (0: the caller's)
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()
    model_type: str | None = None  # HF model_type of `model`: adds its family's server_args (`vllm_families`)

    def __post_init__(self) -> None:
        check_nice(self.nice)
        if self.model_type is not None and self.model_type not in VLLM_FAMILIES:
            raise ValueError(
                f"model_type: expected one of {sorted(VLLM_FAMILIES)} (the families the vLLM adapter knows), "
                f"got {self.model_type!r}"
            )

    def command(self, port: int) -> list[str]:
        cmd = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model,
            "--served-model-name", self.served_model_name,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--max-num-seqs", str(self.max_num_seqs),
            "--seed", str(self.seed),
            "--enable-scale-out",  # /inference/v1/generate: token ids in/out, log-probs, weight_versions
            "--logprobs-mode", "processed_logprobs",  # log-probs under softmax(logits / T), as the trainer
            "--worker-extension-cls", EXTENSION_CLS,
        ]  # fmt: skip
        if self.routing == "extension":
            cmd += ["--no-enable-prefix-caching", "--enforce-eager"]
            # No chunked prefill on CPU. vllm 0.32 discards the token sampled for a partly prefilled request and
            # rewinds that request's seeded generator (`gpu_model_runner._bookkeeping_sync`: `gen.set_offset`),
            # which a CPU generator refuses ("CPU Generator does not use offset"): the engine core dies. That
            # happened when 64 seeded calls resumed after an abort push re-prefilled their long prefixes at once.
            # Whole prefills need a token budget of at least one full context.
            cmd += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(self.max_model_len, 4096))]
        elif self.enforce_eager:
            cmd.append("--enforce-eager")
        if self.routing == "native":
            cmd += ["--enable-return-routed-experts", "--enable-prefix-caching"]
        if self.model_type is not None:
            cmd += VLLM_FAMILIES[self.model_type].server_args
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)  # the child uses vLLM's venv, not ours
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(EXTENSION_DIR), env.get("PYTHONPATH", "")) if p)
        env["VLLM_SERVER_DEV_MODE"] = "1"  # /pause, /resume, /abort_requests, /collective_rpc, ...
        env["VLLM_HOST_IP"] = "127.0.0.1"
        env["VLLM_CPU_KVCACHE_SPACE"] = str(self.kv_cache_gib)
        env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
        env.update(dict(self.extra_env))
        return env


class VLLMServer:
    """A running vLLM server. Use `VLLMServer.launch(config)`, or pass the `process` the caller just started."""

    def __init__(
        self,
        base_url: str,
        *,
        process: subprocess.Popen[bytes] | None = None,
        log_path: Path | None = None,
        nice: int = SERVER_NICE,
    ) -> None:
        """`process`: the server (or a launcher in the server's session) just started by the caller, which this
        object then owns: its CPU priority is lowered to `nice` (see `cpu_priority`) and `stop()` kills its group."""
        self.base_url = base_url.rstrip("/")
        self.process = process
        self.log_path = log_path
        self.startup_s: float | None = None
        if process is not None:
            atexit.register(self.stop)
            with contextlib.suppress(ProcessLookupError):  # it already exited: wait_healthy reports why, with its log
                lower_cpu_priority(process.pid, nice)

    @classmethod
    def launch(cls, config: VLLMServerConfig) -> VLLMServer:
        if not Path(config.python).exists():
            raise VLLMServerError(
                f"vLLM interpreter {config.python} does not exist: run scripts/setup_vllm_env.sh or set VLLM_PYTHON"
            )
        port = free_port()
        log_fd, log_name = tempfile.mkstemp(prefix="vllm-server-", suffix=".log")
        started = time.monotonic()
        with os.fdopen(log_fd, "wb") as log:
            process = subprocess.Popen(
                config.command(port),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=config.environment(),
                start_new_session=True,
            )
        server = cls(f"http://127.0.0.1:{port}", process=process, log_path=Path(log_name), nice=config.nice)
        try:
            server.wait_healthy(config.startup_timeout_s)
        except BaseException:
            server.stop()
            raise
        server.startup_s = time.monotonic() - started
        return server

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        with self.log_path.open("rb") as f:
            tail = deque(f, maxlen=lines)
        return b"".join(tail).decode("utf-8", "replace")

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise VLLMServerError(
                    f"vLLM server exited with code {self.process.returncode} before becoming healthy; "
                    f"last log lines:\n{self.log_tail()}"
                )
            try:
                r = httpx.get(f"{self.base_url}/health", timeout=2.0)
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            time.sleep(0.5)
        raise VLLMServerError(
            f"vLLM server at {self.base_url} not healthy after {timeout_s:.0f} s (last: {last}); "
            f"last log lines:\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = 15.0) -> None:
        """Kills the server's whole process group (SIGTERM, then SIGKILL). Idempotent; no-op without a process."""
        proc = self.process
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout_s)
        with contextlib.suppress(ProcessLookupError):  # workers that ignored SIGTERM
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
        self.process = None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
