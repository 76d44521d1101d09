"""SGLangEngine against a REAL SGLang server (GPU only; scripts/gpu_check_adapters.sh starts one and sets
ENGINE_ADAPTERS_SGLANG_URL and ENGINE_ADAPTERS_SGLANG_MODEL). Skipped everywhere else."""

from __future__ import annotations

import os

import pytest
from engine_adapters.sglang import ModelShape, SGLangEngine
from rollout_core.testing import engine_contract

URL = os.environ.get("ENGINE_ADAPTERS_SGLANG_URL")
MODEL = os.environ.get("ENGINE_ADAPTERS_SGLANG_MODEL")
UPDATE_DIR = os.environ.get("ENGINE_ADAPTERS_SGLANG_UPDATE_DIR")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(URL is None or MODEL is None, reason="no SGLang server (ENGINE_ADAPTERS_SGLANG_URL unset)"),
]


@pytest.mark.parametrize("check", engine_contract.CHECKS, ids=lambda c: c.__name__)
def test_sglang_engine_passes_engine_contract_on_a_real_server(check: engine_contract.Check) -> None:
    assert URL is not None and MODEL is not None
    shape = ModelShape.from_hf_config(MODEL, max_context=1024)

    async def make() -> engine_contract.EngineHarness:
        engine = await SGLangEngine.connect(URL, shape)

        async def update() -> None:
            assert UPDATE_DIR is not None
            await engine.update_weights(UPDATE_DIR, engine.weight_version + 1)

        return engine_contract.EngineHarness(
            engine, shape.vocab_size, shape.max_context, update if UPDATE_DIR else None, engine.close
        )

    engine_contract.run_check(check, make)
