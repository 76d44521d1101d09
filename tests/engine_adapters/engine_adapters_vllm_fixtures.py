"""Shared by the vLLM test modules: where vLLM's interpreter is, and the served-model record."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_adapters.vllm.server import RoutingSource, VLLMServer, default_python

VLLM_PYTHON = default_python()


# "extension" (CPU: our router-capture worker extension) or "native" (GPU: --enable-return-routed-experts);
# scripts/gpu_check_adapters.sh sets "native"
def _routing_from_env() -> RoutingSource:
    value = os.environ.get("ENGINE_ADAPTERS_VLLM_ROUTING", "extension")
    if value == "extension":
        return "extension"
    if value == "native":
        return "native"
    raise ValueError(f"ENGINE_ADAPTERS_VLLM_ROUTING: expected 'extension' or 'native', got {value!r}")


VLLM_ROUTING: RoutingSource = _routing_from_env()
requires_vllm_env = pytest.mark.skipif(
    not VLLM_PYTHON.exists(), reason=f"vLLM environment absent ({VLLM_PYTHON}): run scripts/setup_vllm_env.sh"
)


@dataclass
class ServedModel:
    """A running server and the checkpoint folders it can be switched between (index = weight seed)."""

    server: VLLMServer
    checkpoints: list[Path]
    loaded: Path  # the folder whose weights the server serves now
    routing: RoutingSource = VLLM_ROUTING
