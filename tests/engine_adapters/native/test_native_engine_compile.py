"""`compile_decode=True` (torch.compile of the decode step) gives the same greedy tokens as eager; the engine, not
the model, holds the decode state."""

import asyncio

import numpy as np
import pytest
from engine_adapters.native import NativeEngine
from engine_adapters.native.testing import tiny_model
from rollout_core import SamplingParams


@pytest.mark.slow
def test_native_engine_compiled_decode_matches_eager():
    params = SamplingParams(max_new_tokens=16, temperature=0.0)
    prompts = [[5 + i, 9, 33, 2 + 3 * i][: 2 + i % 3] for i in range(6)]

    def run(compile_decode: bool):
        engine = NativeEngine(tiny_model(3), slots=8, max_len=64, eos_token_ids=(), compile_decode=compile_decode)

        async def main():
            return await asyncio.gather(*(engine.generate(f"c{i}", p, params) for i, p in enumerate(prompts)))

        return asyncio.run(main())

    for eager, compiled in zip(run(False), run(True), strict=True):
        assert compiled.token_ids == eager.token_ids
        np.testing.assert_allclose(compiled.log_probs, eager.log_probs, atol=1e-5)
        np.testing.assert_array_equal(compiled.routed_experts, eager.routed_experts)


def test_native_engine_says_whether_its_decode_step_is_compiled_and_the_model_holds_no_decode_state():
    eager = NativeEngine(tiny_model(3), slots=2, max_len=16)
    compiled = NativeEngine(tiny_model(3), slots=2, max_len=16, compile_decode=True)
    assert (eager.decode_compiled, compiled.decode_compiled) == (False, True)
    with pytest.raises(AttributeError):
        compiled.decode_compiled = False  # read-only
    engine_state = ("_decode_weights", "_decode_compiled", "_kernel_threads", "_graph_layers", "forward_cached")
    assert not [name for name in engine_state if hasattr(compiled.model, name)]
