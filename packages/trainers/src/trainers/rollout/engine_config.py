"""The `rollout.engine` section: which inference engine serves the rollouts, a tagged union chosen by `kind`
(`native_engine.EngineConfig`, `engine_adapters`' vLLM and SGLang sections). Standard library only (`--help` imports
it); each member's `build(site)` imports its engine."""

from __future__ import annotations

from engine_adapters.engine_config import SGLangEngineConfig, VLLMEngineConfig
from native_engine.config import EngineConfig

RolloutEngineConfig = EngineConfig | VLLMEngineConfig | SGLangEngineConfig
"""Rollout engines behind one `rollout_core.RolloutEngine` protocol: generation through `rollout_core.Engine`, plus
how a weight push reaches the engine (in place, or an HF folder a server reloads)."""
