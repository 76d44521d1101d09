"""The `rollout.engine` section: which inference engine serves the rollouts, a tagged union chosen by `kind`
(`rollout_core.native_engine_config.EngineConfig`, `rollout_core.server_engine_config`'s vLLM and SGLang sections).
Standard library only (`--help` imports it); each member's `build(site)` opens the engine registered for its kind
(`rollout_core.engine_registry`), so nothing here imports an engine."""

from __future__ import annotations

from rollout_core.native_engine_config import EngineConfig
from rollout_core.server_engine_config import SGLangEngineConfig, VLLMEngineConfig

RolloutEngineConfig = EngineConfig | VLLMEngineConfig | SGLangEngineConfig
"""Rollout engines behind one `rollout_core.RolloutEngine` protocol: generation through `rollout_core.Engine`, plus
how a weight push reaches the engine (in place, or an HF folder a server reloads)."""
