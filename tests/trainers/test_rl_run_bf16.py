"""bf16 rollouts: a native engine in bf16 (weights and KV cache) samples and takes fp32 pushes cast to bf16; the
policy trainer publishes its fp32 weights in the engine's dtype."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from engine_adapters.native.testing import tiny_model
from moe_models import save_pretrained
from rollout_core import SamplingParams
from rollout_core.native_engine_config import EngineConfig
from run_lifecycle import RunDir
from trainers.algorithm import PPOConfig
from trainers.algorithm.build import build_algorithm
from trainers.backend import TorchBackend
from trainers.recipe.policy_trainer import PolicyTrainer
from trainers.rollout.engine_site import EngineSite
from trainers.step_runner import LocalSteps
from trainers.train_config import TrainLoopConfig
from trainers.weight_sync import LocalWeightSync


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    save_pretrained(tiny_model(), tmp_path / "ckpt")
    return str(tmp_path / "ckpt")


def test_a_bf16_native_engine_samples_with_bf16_weights_and_cache_and_casts_pushes(checkpoint: str, tmp_path: Path):
    async def run() -> None:
        engine = await EngineConfig(slots=4, dtype="bfloat16").build(EngineSite(checkpoint, 64, 0, str(tmp_path)))
        try:
            model = engine.model
            assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
            assert engine.config.dtype == "bfloat16"
            seg = await engine.generate("a", [1, 5, 7], SamplingParams(max_new_tokens=6, seed=1))
            assert len(seg.token_ids) == 6 and all(lp <= 0 for lp in seg.log_probs)
            fp32 = {k: v.float() * 1.001 for k, v in tiny_model().state_dict().items()}
            await engine.push(fp32, 1, "abort")
            name, param = next(iter(model.named_parameters()))
            assert param.dtype == torch.bfloat16 and torch.equal(param, fp32[name].to(torch.bfloat16))
        finally:
            await engine.close()

    asyncio.run(run())


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_the_policy_trainer_publishes_its_fp32_weights_in_the_engine_dtype(dtype: torch.dtype | None, tmp_path: Path):
    backend = TorchBackend(tiny_model(), device="cpu")
    steps = LocalSteps(backend, build_algorithm(PPOConfig(), max_new_tokens=8), TrainLoopConfig(), seed=0)
    trainer = PolicyTrainer(
        steps, TrainLoopConfig(), pad_token_id=0, run=RunDir.create(tmp_path / "run"), weight_dtype=dtype
    )
    sync = LocalWeightSync()
    weights = sync.fetch(trainer.publish(sync))
    assert {v.dtype for v in weights.values()} == {dtype or torch.float32}
    assert {p.dtype for p in backend.model.parameters()} == {torch.float32}  # the master weights stay fp32
