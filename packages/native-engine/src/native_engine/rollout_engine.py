"""The native engine as a rollout engine (`EngineConfig.build`): the checkpoint loaded in the config's dtype
(weights and KV cache), weights loaded in place between pause and resume."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

import torch
from moe_models import load_pretrained
from rollout_core import Engine

from native_engine.config import EngineConfig
from native_engine.engine import NativeEngine
from native_engine.rollout_protocol import RolloutSite


class NativeRolloutEngine:
    """Its model steps run on a thread of their own at `site.cpu_threads` torch threads (an async rollouter's
    `ray.rollouter_threads`; 1 where the trainer shares the process, whatever its `run.torch_threads`: two OpenMP
    teams sharing the same cores slow both, see `native_engine.step_thread`)."""

    def __init__(self, cfg: EngineConfig, site: RolloutSite) -> None:
        model = load_pretrained(site.checkpoint_dir).to(getattr(torch, cfg.dtype))
        threads = cfg.kernel_threads or site.threads()
        self.native = NativeEngine(
            model,
            replace(cfg, kernel_threads=threads),
            max_len=site.max_len,
            seed=site.seed,
            true_on_policy=site.true_on_policy,
            step_threads=site.cpu_threads or 1,
        )
        self.engine: Engine = self.native

    async def push(self, weights: Mapping[str, torch.Tensor], version: int, mode: Literal["keep", "abort"]) -> None:
        await self.native.pause(mode)
        try:
            await self.native.update_weights(dict(weights), version)
        finally:
            await self.native.resume()

    async def close(self) -> None:
        await self.native.close()
