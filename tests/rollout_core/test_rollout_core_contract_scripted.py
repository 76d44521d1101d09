"""The engine contract suite passes on the scripted engine (and so checks the suite itself)."""

import pytest
from rollout_core.testing import ScriptedEngine, engine_contract
from rollout_core.testing.engine_contract import EngineHarness


async def make_harness() -> EngineHarness:
    engine = ScriptedEngine(token_delay=0.0005, vocab_size=300, max_context=512)

    async def update() -> None:
        engine.bump_version(abort_inflight=True)

    return EngineHarness(engine=engine, vocab_size=300, max_context=512, update_weights=update)


@pytest.mark.parametrize("check", engine_contract.CHECKS, ids=lambda c: c.__name__)
def test_scripted_engine_passes_the_contract(check):
    engine_contract.run_check(check, make_harness)


def test_contract_catches_an_engine_returning_n_rows():
    async def make_bad() -> EngineHarness:
        return EngineHarness(engine=ScriptedEngine(full_rows=True), vocab_size=512, max_context=4096)

    with pytest.raises(AssertionError, match="N-1 convention"):
        engine_contract.run_check(engine_contract.check_generate_shapes, make_bad)
