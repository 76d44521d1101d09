"""The embedded default engine: continuous batching over a slot KV cache, router capture, abort/pause/live weights.

Exports are lazy (PEP 562): importing the package never imports torch. Its section (`rollout.engine` of kind
`native`) is `rollout_core.native_engine_config.EngineConfig`, which builds the engine this package registers
(`rollout_core.engine_registry`)."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "PAUSE_MODES": "native_engine.engine",
    "EngineBusyError": "native_engine.engine",
    "EngineConfig": "rollout_core.native_engine_config",
    "EngineMetrics": "native_engine.metrics",
    "NativeEngine": "native_engine.engine",
    "PauseMode": "native_engine.engine",
    "Request": "native_engine.request",
    "RequestStatus": "native_engine.request",
    "SamplingBatch": "native_engine.sampler",
    "Scheduler": "native_engine.scheduler",
    "SchedulePlan": "native_engine.scheduler",
    "sample": "native_engine.sampler",
    "uniform_rows": "native_engine.sampler",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'native_engine' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
