"""Fixtures for the vLLM tests: tiny checkpoints and one vLLM server per test module (killed at module end)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the uniquely named helper modules next to this file

from engine_adapters.vllm.server import VLLMServer, VLLMServerConfig
from engine_adapters_vllm_fixtures import VLLM_PYTHON, VLLM_ROUTING, ServedModel


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from engine_adapters_tiny_moe import save_checkpoint

    root = tmp_path_factory.mktemp("tiny-moe")
    return [save_checkpoint(root / f"seed{seed}", seed) for seed in range(3)]


@pytest.fixture(scope="module")
def served(checkpoints: list[Path]) -> Iterator[ServedModel]:
    config = VLLMServerConfig(
        model=str(checkpoints[0]), python=VLLM_PYTHON, routing=VLLM_ROUTING, max_model_len=2048
    )  # 2048 = the tiny model's max_position_embeddings; long generations let updates land mid-call
    server = VLLMServer.launch(config)
    print(f"\nvLLM server healthy after {server.startup_s:.1f} s")
    try:
        yield ServedModel(server, checkpoints, checkpoints[0])
    finally:
        server.stop()
