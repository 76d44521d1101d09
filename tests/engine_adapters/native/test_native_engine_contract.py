"""The native engine passes the shared engine contract unchanged (pause "abort" and pause "keep" updates)."""

import pytest
from engine_adapters.native.testing import make_native_harness
from rollout_core.testing import engine_contract


@pytest.mark.parametrize("check", engine_contract.CHECKS, ids=lambda c: c.__name__)
def test_native_engine_passes_engine_contract(check):
    async def make_harness():
        return make_native_harness(seed=0)

    engine_contract.run_check(check, make_harness)


def test_native_engine_passes_resume_check_with_pause_keep_updates():
    async def make_harness():
        return make_native_harness(seed=1, pause_mode="keep")

    engine_contract.run_check(engine_contract.check_resume_across_weight_update, make_harness)
