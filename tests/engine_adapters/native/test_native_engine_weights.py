"""A weight push may be a mapping of numpy arrays or of floating torch tensors of any dtype (cast to each parameter's
dtype when loaded), a safetensors file or an HF directory; anything else is refused with what it got."""

import asyncio

import numpy as np
import pytest
import torch
from engine_adapters.native import NativeEngine
from engine_adapters.native.testing import perturbed_state, tiny_model
from engine_adapters.native.weights import read_state
from moe_models import state_dict_numpy
from rollout_core import SamplingParams
from safetensors.torch import save_file


def _bf16_state(seed: int) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in perturbed_state(tiny_model(0), seed).items()}


def test_a_bfloat16_tensor_push_loads_widened_into_fp32_parameters_and_serves_its_version():
    engine = NativeEngine(tiny_model(0), slots=2, max_len=64, eos_token_ids=())
    pushed = _bf16_state(seed=1)
    params = SamplingParams(max_new_tokens=8, temperature=0.0)

    async def main():
        before = await engine.generate("a", [5, 6, 7], params)
        await engine.update_weights(pushed, 1)
        return before, await engine.generate("b", [5, 6, 7], params)

    before, after = asyncio.run(main())
    loaded = state_dict_numpy(engine.model)
    assert all(p.dtype == torch.float32 for p in engine.model.parameters())
    assert sorted(loaded) == sorted(pushed)
    assert all(np.array_equal(loaded[k], pushed[k].float().numpy()) for k in pushed)
    assert after.weight_version == 1 and after.token_ids != before.token_ids


def test_a_numpy_push_and_a_tensor_push_of_the_same_values_load_the_same_weights():
    state = perturbed_state(tiny_model(0), seed=2)
    models = []
    for source in (state, {k: torch.from_numpy(v.copy()) for k, v in state.items()}):
        engine = NativeEngine(tiny_model(0), slots=2, max_len=64)
        asyncio.run(engine.update_weights(source, 1))
        models.append(state_dict_numpy(engine.model))
    assert all(np.array_equal(models[0][k], models[1][k]) for k in state)


def test_read_state_keeps_each_tensors_dtype_and_copies_read_only_arrays(tmp_path):
    frozen = np.arange(6, dtype=np.float32).reshape(2, 3)
    frozen.setflags(write=False)
    state = read_state({"a": frozen, "b": torch.ones(2, dtype=torch.bfloat16)})
    assert state["a"].dtype == torch.float32 and state["a"].tolist() == frozen.tolist()
    assert state["b"].dtype == torch.bfloat16
    save_file({"w": torch.full((3,), 0.5, dtype=torch.bfloat16)}, str(tmp_path / "w.safetensors"))
    assert read_state(tmp_path / "w.safetensors")["w"].dtype == torch.bfloat16
    assert read_state(tmp_path)["w"].tolist() == [0.5, 0.5, 0.5]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"w": torch.ones(2, dtype=torch.int64)}, "expected floating tensors, got torch.int64 for 'w'"),
        ({"w": [1.0, 2.0]}, "expected numpy arrays or torch tensors, got list for 'w'"),
        (3, "expected a mapping of arrays/tensors or a path, got int"),
    ],
)
def test_read_state_refuses_what_is_not_a_weight_state(source, message):
    with pytest.raises(ValueError, match=message):
        read_state(source)
