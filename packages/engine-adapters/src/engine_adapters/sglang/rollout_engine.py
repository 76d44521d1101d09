"""A running SGLang server as a rollout engine: weights are written as an HF folder under a directory the server
can read, then loaded with SGLang's `update_weights_from_disk` (labelled with their version)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollout_core import FolderWriter, PauseMode, RolloutSite
from rollout_core.server_engine_config import SGLangEngineConfig

from engine_adapters.sglang.engine import ModelShape, SGLangEngine


class SGLangRolloutEngine(SGLangEngine):
    """The adapter (`SGLangEngine`) that turns a push into an HF folder under a directory the server reads."""

    weights_dir: Path
    keep_mode: str
    _write_weights: FolderWriter

    @classmethod
    async def open(cls, url: str, site: RolloutSite, weights_dir: Path, keep_mode: str) -> SGLangRolloutEngine:
        shape = ModelShape.from_hf_config(site.checkpoint_dir, max_context=site.max_len)
        engine = await cls.connect(url, shape)
        engine.sample_only(site.vocab_size)
        try:
            engine._write_weights = await asyncio.to_thread(site.folder_writer)
        except BaseException:
            await engine.close()
            raise
        engine.weights_dir, engine.keep_mode = weights_dir, keep_mode
        return engine

    async def push(self, weights: Mapping[str, Any], version: int, mode: PauseMode) -> None:
        """`keep` pauses with `rollout.engine.pause_mode_keep` (retract or in_place), `abort` aborts in-flight
        requests (their calls return the tokens so far and resume)."""
        folder = self.weights_dir / f"weights-v{version}"
        try:
            await asyncio.to_thread(self._write_weights, weights, folder)
            pause = self.keep_mode if mode == "keep" else "abort"
            await self.update_weights(str(folder), version, pause_mode=pause)  # type: ignore[arg-type]
        finally:
            shutil.rmtree(folder, ignore_errors=True)


async def open_sglang_engine(cfg: SGLangEngineConfig, site: RolloutSite) -> SGLangRolloutEngine:
    """The adapter of server `cfg.urls[site.index]` (the rollout engine of kind `sglang`): pushed weights are
    written under `cfg.weights_dir` (empty: the site's working directory)."""
    if site.index >= len(cfg.urls):
        raise ValueError(
            f"rollout.engine.urls: expected a server URL for engine {site.index} ({site.index + 1} or more URLs), "
            f"got {len(cfg.urls)}: {list(cfg.urls)}"
        )
    weights_dir = Path(cfg.weights_dir) if cfg.weights_dir else Path(site.work_dir)
    return await SGLangRolloutEngine.open(cfg.urls[site.index], site, weights_dir, cfg.pause_mode_keep)
