"""The embedded default engine: continuous batching over a slot KV cache, router capture, abort/pause/live weights.

Exports are lazy (PEP 562): importing the package never imports torch. Its section (`rollout.engine` of kind
`native`) is `rollout_core.native_engine_config.EngineConfig`, which builds the engine this package registers
(`rollout_core.engine_registry`)."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "PAUSE_MODES": "engine_adapters.native.engine",
    "EngineBusyError": "engine_adapters.native.engine",
    "EngineConfig": "rollout_core.native_engine_config",
    "EngineMetrics": "engine_adapters.native.metrics",
    "NativeEngine": "engine_adapters.native.engine",
    "PauseMode": "engine_adapters.native.engine",
    "Request": "engine_adapters.native.request",
    "RequestStatus": "engine_adapters.native.request",
    "SamplingBatch": "engine_adapters.native.sampler",
    "Scheduler": "engine_adapters.native.scheduler",
    "SchedulePlan": "engine_adapters.native.scheduler",
    "sample": "engine_adapters.native.sampler",
    "uniform_rows": "engine_adapters.native.sampler",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'native_engine' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
