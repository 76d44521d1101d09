"""The embedded default engine: continuous batching over a slot KV cache, router capture, abort/pause/live weights."""

from native_engine.config import EngineConfig
from native_engine.engine import PAUSE_MODES, EngineBusyError, NativeEngine, PauseMode
from native_engine.metrics import EngineMetrics
from native_engine.request import Request, RequestStatus
from native_engine.sampler import SamplingBatch, sample, uniform_rows
from native_engine.scheduler import Scheduler, StepPlan

__all__ = [
    "PAUSE_MODES",
    "EngineBusyError",
    "EngineConfig",
    "EngineMetrics",
    "NativeEngine",
    "PauseMode",
    "Request",
    "RequestStatus",
    "SamplingBatch",
    "Scheduler",
    "StepPlan",
    "sample",
    "uniform_rows",
]
