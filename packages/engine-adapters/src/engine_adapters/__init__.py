"""vLLM and SGLang engines behind `rollout_core.Engine`, over HTTP. Light: never imports torch, vllm or sglang.

- `engine_adapters.vllm`: `VLLMServer` (process), `VLLMClient` (HTTP), `VLLMEngine` (adapter) and the worker
  extension that runs inside vLLM (router capture on CPU, weight reload with the CPU MoE re-pack);
- `engine_adapters.sglang`: `SGLangEngine` over SGLang's native API;
- `engine_adapters.routing_rows`: routed-expert payload decoding and the N-1 normalisation both use.
"""

from engine_adapters.routing_rows import (
    decode_int32_base64,
    decode_npy_base64,
    expected_rows,
    normalise_rows,
    rows_from_positions,
)
from engine_adapters.sglang import ModelShape, SGLangEngine
from engine_adapters.vllm import VLLMEngine, VLLMServer, VLLMServerConfig

__all__ = [
    "ModelShape",
    "SGLangEngine",
    "VLLMEngine",
    "VLLMServer",
    "VLLMServerConfig",
    "decode_int32_base64",
    "decode_npy_base64",
    "expected_rows",
    "normalise_rows",
    "rows_from_positions",
]
