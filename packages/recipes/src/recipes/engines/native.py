"""The native engine as a rollout engine: weights are loaded in place between pause and resume, cast to the
engine's dtype (`rollout.engine.dtype`: weights and KV cache)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from moe_models import load_pretrained
from native_engine import EngineConfig, NativeEngine
from rollout_core import Engine

from recipes.engine_config import EngineSite, NativeEngineConfig
from recipes.engines.protocol import PauseMode


class NativeRolloutEngine:
    def __init__(self, cfg: NativeEngineConfig, site: EngineSite) -> None:
        model = load_pretrained(site.checkpoint_dir).to(getattr(torch, cfg.dtype))
        self.native = NativeEngine(
            model,
            EngineConfig(
                max_slots=cfg.slots,
                max_len=site.max_len,
                seed=site.seed,
                compile_decode=cfg.compile_decode,
                kernel_threads=cfg.kernel_threads or site.threads(),
                step_delay_ms=cfg.step_delay_ms,
                cache_dtype=cfg.dtype,
                true_on_policy=site.true_on_policy,
                step_threads=site.cpu_threads or 1,
            ),
        )
        self.engine: Engine = self.native

    async def push(self, weights: Mapping[str, torch.Tensor], version: int, mode: PauseMode) -> None:
        await self.native.pause(mode)
        try:
            await self.native.update_weights(dict(weights), version)
        finally:
            await self.native.resume()

    async def close(self) -> None:
        await self.native.close()
