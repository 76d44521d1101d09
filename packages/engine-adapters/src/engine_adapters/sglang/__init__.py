"""SGLang behind `rollout_core.Engine` over its native HTTP API (tested here against a wire-format fake only)."""

from engine_adapters.sglang.client import SGLangClient, SGLangPauseMode, SGLangServerError
from engine_adapters.sglang.engine import ModelShape, SGLangEngine
from engine_adapters.sglang.response import SGLangGenerateError, SGLangResponse

__all__ = [
    "ModelShape",
    "SGLangClient",
    "SGLangEngine",
    "SGLangGenerateError",
    "SGLangPauseMode",
    "SGLangResponse",
    "SGLangServerError",
]
