"""Native engine rollouts vs the training backend: router replay reproduces the engine's log-probs to fp32 noise,
never does worse than routing afresh, and a weight push keeps engine and trainer in lockstep."""

from __future__ import annotations

import asyncio

import torch
from engine_adapters.native import NativeEngine
from engine_adapters.native.testing import tiny_model
from rollout_core import SamplingParams, generate_with_resume
from trainers import TrainBatch, TrainLoopConfig, TrainSample, collate, train_step
from trainers.algorithm import PPOConfig
from trainers.algorithm.build import build_algorithm
from trainers.backend import OptimConfig, TorchBackend
from trainers.weight_sync import LocalWeightSync

PAD = 0


def engine_batch(engine: NativeEngine, seed: int) -> TrainBatch:
    async def run() -> list[TrainSample]:
        prompts = [[2 + (i * 7 + k) % 100 for k in range(3 + i % 5)] for i in range(6)]
        calls = [
            generate_with_resume(
                engine, f"r{seed}-{i}-{j}", p, SamplingParams(max_new_tokens=8, seed=seed + 10 * i + j)
            )
            for i, p in enumerate(prompts)
            for j in range(2)
        ]
        trajs = await asyncio.gather(*calls)
        return [
            TrainSample.from_trajectory(
                t, uid=f"u{n}", group_id=f"g{n // 2}", reward=float(n % 3 == 0), data_source="t"
            )
            for n, t in enumerate(trajs)
        ]

    return collate(asyncio.run(run()), PAD)


def score(backend: TorchBackend, batch: TrainBatch, *, replay: bool) -> torch.Tensor:
    (lp,) = backend.log_probs([batch], replay=replay)
    return lp


async def push_weights(engine: NativeEngine, backend: TorchBackend) -> None:
    """The sync app's push: publish through a LocalWeightSync, pause, load, resume."""
    sync = LocalWeightSync()
    handle = sync.publish(*backend.export_weights())
    await engine.pause("abort")
    await engine.update_weights(sync.fetch(handle), handle.version)
    await engine.resume()


def mean_abs(lp: torch.Tensor, batch: TrainBatch) -> float:
    return float(((lp - batch.rollout_log_probs).abs() * batch.response_mask).sum() / batch.response_mask.sum())


def test_replay_matches_the_native_engine_to_fp32_noise_and_never_does_worse() -> None:
    torch.set_num_threads(1)
    engine = NativeEngine(tiny_model(0), slots=16, max_len=64)
    backend = TorchBackend(tiny_model(0).train(), device="cpu")
    batch = engine_batch(engine, seed=1)
    with_replay = mean_abs(score(backend, batch, replay=True), batch)
    without = mean_abs(score(backend, batch, replay=False), batch)
    assert with_replay < 2e-6  # fp32, identical weights: rounding only
    assert with_replay <= without + 1e-7


def test_replay_beats_fresh_routing_when_trainer_routers_drift() -> None:
    torch.set_num_threads(1)
    engine = NativeEngine(tiny_model(0), slots=16, max_len=64)
    model = tiny_model(0).train()
    with torch.no_grad():  # perturbed routers stand in for train/inference kernel differences
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.add_(torch.randn_like(p) * 0.5)
    backend = TorchBackend(model, device="cpu")
    batch = engine_batch(engine, seed=2)
    assert mean_abs(score(backend, batch, replay=True), batch) < mean_abs(score(backend, batch, replay=False), batch)


def test_weight_push_keeps_engine_and_trainer_in_lockstep() -> None:
    torch.set_num_threads(1)
    engine = NativeEngine(tiny_model(0), slots=16, max_len=64)
    backend = TorchBackend(tiny_model(0).train(), OptimConfig(lr=1e-2), device="cpu")
    batch = engine_batch(engine, seed=3)
    train_step(backend, build_algorithm(PPOConfig(), max_new_tokens=8), batch, TrainLoopConfig())
    asyncio.run(push_weights(engine, backend))
    assert engine.weight_version == backend.version == 1
    after = engine_batch(engine, seed=4)
    assert (after.token_versions[after.response_mask.bool()] == 1).all()
    assert mean_abs(score(backend, after, replay=True), after) < 2e-6
