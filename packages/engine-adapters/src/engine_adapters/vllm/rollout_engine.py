"""A vLLM server as a rollout engine, started and owned by the process that builds it.

Invariants:
- the server never outlives its owner: `close()` and every failed start stop it, and `server_guard` ends its
  whole process tree when the owner's process dies (a crash, `ray.kill`, Ray's shutdown), so no orphaned server
  or engine core holds a core;
- its output goes to `<work_dir>/vllm-server.log`; pushed weights are written under `work_dir` and deleted once
  loaded (vLLM's reload reads files; on CPU the project's worker extension re-packs the experts after it);
- its `max_model_len` equals the site's `max_len` (longest prompt + response budget), so every resumed call
  (prompt + tokens so far, remaining budget) fits.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollout_core import FolderWriter, PauseMode, RolloutSite
from rollout_core.server_engine_config import VLLMEngineConfig
from rollout_core.vllm_families import read_model_type

from engine_adapters.vllm import server_guard
from engine_adapters.vllm.engine import VLLMEngine
from engine_adapters.vllm.server import VLLMServer, VLLMServerConfig, VLLMServerError, default_python, free_port

VLLM_LOG_NAME = "vllm-server.log"
VLLM_MAX_NUM_SEQS = 256  # cap of vLLM's max_num_seqs: requests beyond it wait in vLLM's scheduler queue
SERVER_GUARD = Path(server_guard.__file__).resolve()  # run by vLLM's interpreter: stdlib only


def vllm_server_config(cfg: VLLMEngineConfig, site: RolloutSite) -> VLLMServerConfig:
    """The server to launch (`cfg.python` empty: `.vllm-env/bin/python` found from the working directory), with the
    server arguments of the checkpoint's model family (its config.json `model_type`, `vllm_families`)."""
    python = Path(cfg.python) if cfg.python else default_python()
    return VLLMServerConfig(
        model=site.checkpoint_dir,
        model_type=read_model_type(site.checkpoint_dir),
        python=python,
        max_model_len=site.max_len,
        max_num_seqs=min(cfg.max_num_seqs, VLLM_MAX_NUM_SEQS),
        seed=site.seed,
        startup_timeout_s=cfg.startup_timeout_s,
        dtype=cfg.dtype,
    )


def start_vllm_server(config: VLLMServerConfig, log_path: Path) -> VLLMServer:
    """Starts the server process (returns at once; `wait_healthy` before use), its output appended to `log_path`.

    Same command and environment as `VLLMServer.launch`, but the log is ours and the process is guarded (see
    `server_guard`). The server runs in its own session, so `VLLMServer.stop` kills its whole process group.
    """
    python = Path(config.python)
    if not python.exists():
        raise VLLMServerError(
            f"vLLM interpreter {python} does not exist: run scripts/setup_vllm_env.sh or set rollout.engine.python"
        )
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [str(python), "-I", str(SERVER_GUARD), str(os.getpid()), *config.command(port)]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=config.environment(), start_new_session=True
        )
    return VLLMServer(f"http://127.0.0.1:{port}", process=process, log_path=log_path)


async def start_healthy_vllm_server(config: VLLMServerConfig, log_path: Path) -> VLLMServer:
    """`start_vllm_server`, then waits (off the event loop) until it answers; a server that fails to come up, or a
    wait that is cancelled, is stopped."""
    server = start_vllm_server(config, log_path)
    try:
        await asyncio.to_thread(server.wait_healthy, config.startup_timeout_s)
    except BaseException:
        await asyncio.to_thread(server.stop)
        raise
    return server


class VLLMRolloutEngine(VLLMEngine):
    """The adapter (`VLLMEngine`) that also owns its server and turns a push into an HF folder vLLM reloads."""

    server: VLLMServer
    site: RolloutSite
    _write_weights: FolderWriter

    @classmethod
    async def launch(cls, cfg: VLLMEngineConfig, site: RolloutSite) -> VLLMRolloutEngine:
        """Starts the server, waits for it off the event loop, connects; any failure stops the server."""
        config = vllm_server_config(cfg, site)
        server = await start_healthy_vllm_server(config, Path(site.work_dir) / VLLM_LOG_NAME)
        try:
            engine = await cls.connect(server.base_url)
        except BaseException:
            await asyncio.to_thread(server.stop)
            raise
        engine.server, engine.site = server, site
        try:
            await engine.sample_only(site.vocab_size)
            if engine.max_context < site.max_len:
                raise VLLMServerError(f"vLLM max_model_len: expected >= {site.max_len}, got {engine.max_context}")
            engine._write_weights = await asyncio.to_thread(site.folder_writer)
        except BaseException:
            await engine.close()
            raise
        return engine

    async def push(self, weights: Mapping[str, Any], version: int, mode: PauseMode) -> None:
        """Writes the weights as an HF folder (off the event loop: generation streams keep being read), then has
        vLLM pause (`mode`), reload it, label it `version` and resume."""
        folder = Path(self.site.work_dir) / f"weights-v{version}"
        try:
            await asyncio.to_thread(self._write_weights, weights, folder)
            await self.update_weights(str(folder), version, pause_mode=mode)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    async def close(self) -> None:
        """Closes the connection, then stops the server it owns."""
        try:
            await super().close()
        finally:
            await asyncio.to_thread(self.server.stop)
