"""vLLM behind `rollout_core.Engine`: server process, HTTP client, stream parsing, adapter, worker extension."""

from engine_adapters.vllm.client import PauseMode, VLLMClient
from engine_adapters.vllm.cpu_priority import SERVER_NICE, lower_cpu_priority
from engine_adapters.vllm.engine import VLLMEngine, engine_request_id
from engine_adapters.vllm.response import ResponseStatus, VLLMGenerateError, VLLMResponse, parse_versions
from engine_adapters.vllm.server import (
    EXTENSION_CLS,
    EXTENSION_DIR,
    RoutingSource,
    VLLMServer,
    VLLMServerConfig,
    VLLMServerError,
    default_python,
)

__all__ = [
    "EXTENSION_CLS",
    "EXTENSION_DIR",
    "SERVER_NICE",
    "PauseMode",
    "ResponseStatus",
    "RoutingSource",
    "VLLMClient",
    "VLLMEngine",
    "VLLMGenerateError",
    "VLLMResponse",
    "VLLMServer",
    "VLLMServerConfig",
    "VLLMServerError",
    "default_python",
    "engine_request_id",
    "lower_cpu_priority",
    "parse_versions",
]
