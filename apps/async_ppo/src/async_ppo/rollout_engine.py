"""RolloutEngine: a rollouter's engine (native or a vLLM server) and how it takes new weights.

Both kinds implement `rollout_core.Engine` for generation; they differ in how a weight push reaches them. The
native engine loads the trainer's numpy state dict in place; vLLM reloads an HF-format folder written here
(vLLM's reload reads files; on CPU our worker extension re-packs the experts).

vLLM invariants (the rollouter owns the server process):
- the server is started from the rollouter's process and never outlives it: `close()` and every failed start
  stop it, and `server_guard` ends its whole process tree when the rollouter's process dies (a crash, `ray.kill`,
  Ray's shutdown), so no orphaned server or engine core holds a core;
- its output goes to `<work_dir>/vllm-server.log`; pushed weights are written under `work_dir` and deleted once
  loaded;
- its `max_model_len` equals the rollouter's `max_len` (longest prompt + response budget), so every resumed
  call (prompt + tokens so far, remaining budget) fits.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from engine_adapters.vllm import VLLMEngine, VLLMServer, VLLMServerConfig, VLLMServerError, default_python
from engine_adapters.vllm.server import free_port
from moe_models import MoEForCausalLM, load_pretrained, load_state_dict_numpy, save_pretrained
from native_engine import EngineConfig, NativeEngine
from rollout_core import Engine

from async_ppo import server_guard

PauseMode = Literal["keep", "abort"]
VLLM_LOG_NAME = "vllm-server.log"
VLLM_MAX_NUM_SEQS = 256  # cap of vLLM's max_num_seqs: requests beyond it wait in vLLM's scheduler queue

SERVER_GUARD = Path(server_guard.__file__).resolve()  # run by vLLM's interpreter: stdlib only


@dataclass(frozen=True)
class EngineSpec:
    """How to build a rollouter's engine from the base checkpoint (an HF-format folder)."""

    kind: Literal["native", "vllm"]
    checkpoint_dir: str
    max_slots: int
    max_len: int
    seed: int
    torch_threads: int = 1
    compile_decode: bool = False  # native engine only
    vllm_python: str = ""
    work_dir: str = ""  # vLLM: where pushed weights and the server log are written


class NativeRolloutEngine:
    def __init__(self, spec: EngineSpec) -> None:
        self.native = NativeEngine.from_pretrained(
            spec.checkpoint_dir,
            EngineConfig(
                max_slots=spec.max_slots,
                max_len=spec.max_len,
                seed=spec.seed,
                num_threads=spec.torch_threads,
                compile_decode=spec.compile_decode,
            ),
        )
        self.engine: Engine = self.native

    async def push(self, state: dict[str, np.ndarray], version: int, mode: PauseMode) -> None:
        engine = self.native
        await engine.pause(mode)
        try:
            await engine.update_weights(state, version)
        finally:
            await engine.resume()

    async def close(self) -> None:
        await self.native.close()


def vllm_server_config(spec: EngineSpec) -> VLLMServerConfig:
    """The server a rollouter launches for `spec` (`vllm_python` empty: `.vllm-env/bin/python` found from the cwd)."""
    if spec.kind != "vllm" or not spec.work_dir:
        raise ValueError(f"vllm_server_config: expected kind 'vllm' and a work_dir, got {spec.kind!r}, "
                         f"{spec.work_dir!r}")  # fmt: skip
    python = Path(spec.vllm_python) if spec.vllm_python else default_python()
    return VLLMServerConfig(model=spec.checkpoint_dir, python=python, max_model_len=spec.max_len,
                            max_num_seqs=min(spec.max_slots, VLLM_MAX_NUM_SEQS), seed=spec.seed)  # fmt: skip


def start_vllm_server(config: VLLMServerConfig, log_path: Path) -> VLLMServer:
    """Starts the server process (returns at once; `wait_healthy` before use), its output appended to `log_path`.

    Same command and environment as `VLLMServer.launch`, but the log is ours and the process is guarded (see
    `server_guard`). The server runs in its own session, so `VLLMServer.stop` kills its whole process group.
    """
    python = Path(config.python)
    if not python.exists():
        raise VLLMServerError(
            f"vLLM interpreter {python} does not exist: run scripts/setup_vllm_env.sh or set rollout.vllm_python"
        )
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [str(python), "-I", str(SERVER_GUARD), str(os.getpid()), *config.command(port)]
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=config.environment(),
                                   start_new_session=True)  # fmt: skip
    return VLLMServer(f"http://127.0.0.1:{port}", process=process, log_path=log_path)


class VLLMRolloutEngine:
    """A vLLM server launched by the rollouter (its own venv, see scripts/setup_vllm_env.sh)."""

    def __init__(self, spec: EngineSpec, server: VLLMServer, engine: VLLMEngine, model: MoEForCausalLM) -> None:
        self.spec, self.server, self.vllm, self._model = spec, server, engine, model
        self.engine: Engine = engine

    @classmethod
    async def launch(cls, spec: EngineSpec) -> VLLMRolloutEngine:
        """Starts the server, waits for it off the event loop, connects; any failure stops the server."""
        config = vllm_server_config(spec)
        server = start_vllm_server(config, Path(spec.work_dir) / VLLM_LOG_NAME)
        engine: VLLMEngine | None = None
        try:
            await asyncio.to_thread(server.wait_healthy, config.startup_timeout_s)
            engine = await VLLMEngine.connect(server.base_url)
            if engine.max_context < spec.max_len:
                raise VLLMServerError(f"vLLM max_model_len: expected >= {spec.max_len}, got {engine.max_context}")
            model = await asyncio.to_thread(load_pretrained, spec.checkpoint_dir)
        except BaseException:
            if engine is not None:
                await engine.close()
            await asyncio.to_thread(server.stop)
            raise
        return cls(spec, server, engine, model)

    def _write_weights(self, state: dict[str, np.ndarray], folder: Path) -> None:
        load_state_dict_numpy(self._model, state)
        save_pretrained(self._model, folder)

    async def push(self, state: dict[str, np.ndarray], version: int, mode: PauseMode) -> None:
        """Writes `state` as an HF folder (off the event loop: generation streams keep being read), then has vLLM
        pause (`mode`), reload it, label it `version` and resume."""
        folder = Path(self.spec.work_dir) / f"weights-v{version}"
        try:
            await asyncio.to_thread(self._write_weights, state, folder)
            await self.vllm.update_weights(str(folder), version, pause_mode=mode)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    async def close(self) -> None:
        try:
            await self.vllm.close()
        finally:
            await asyncio.to_thread(self.server.stop)


RolloutEngine = NativeRolloutEngine | VLLMRolloutEngine


async def build_rollout_engine(spec: EngineSpec) -> RolloutEngine:
    if spec.kind == "native":
        return NativeRolloutEngine(spec)
    if spec.kind == "vllm":
        return await VLLMRolloutEngine.launch(spec)
    raise ValueError(f"rollout.engine: expected 'native' or 'vllm', got {spec.kind!r}")
