"""The native engine as a run builds it (`EngineConfig.build`): the checkpoint loaded in the config's dtype (weights
and KV cache); `NativeEngine` itself is the `rollout_core.RolloutEngine` (its `push` loads weights in place between
pause and resume)."""

from __future__ import annotations

from dataclasses import replace

import torch
from moe_models import load_pretrained
from rollout_core import RolloutSite
from rollout_core.native_engine_config import EngineConfig

from engine_adapters.native.engine import NativeEngine


def open_native_engine(cfg: EngineConfig, site: RolloutSite) -> NativeEngine:
    """Its model steps run on a thread of their own at `site.cpu_threads` torch threads (an async rollouter's
    `ray.rollouter_threads`; 1 where the trainer shares the process, whatever its `run.torch_threads`: two OpenMP
    teams sharing the same cores slow both, see `engine_adapters.native.step_thread`); `kernel_threads` 0:
    `site.threads()`."""
    model = load_pretrained(site.checkpoint_dir, vocab_size=site.vocab_size).to(getattr(torch, cfg.dtype))
    return NativeEngine(
        model,
        replace(cfg, kernel_threads=cfg.kernel_threads or site.threads()),
        max_len=site.max_len,
        seed=site.seed,
        true_on_policy=site.true_on_policy,
        step_threads=site.cpu_threads or 1,
    )
