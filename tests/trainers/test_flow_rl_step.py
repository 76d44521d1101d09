"""flow_train_step on a FlowBackend: the exact recompute, gradient accumulation, the zero-advantage filter,
non-finite losses, and checkpoints that continue bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flow_models.sampler import FlowRollout, sample
from flow_models.sampler_config import SamplerConfig
from flow_models.velocity import VelocityMLP
from flow_models.velocity_config import VelocityConfig
from trainers.backend.config import OptimConfig
from trainers.flow.backend import FlowBackend
from trainers.flow.config import FlowGRPOConfig, FlowTrainConfig
from trainers.flow.step import flow_train_step
from trainers.step_metrics import NonFiniteError

SAMPLER = SamplerConfig(num_steps=6, noise_level=0.7, window_size=2, window_lo=0, window_hi=4)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = VelocityMLP(VelocityConfig(hidden=32, depth=2, time_dim=16))
    torch.nn.init.normal_(model.out.weight, std=0.05)  # the zero-initialised head would make every step alike
    return model


def _batch(model: torch.nn.Module, seed: int = 1, n: int = 16) -> tuple[FlowRollout, np.ndarray, np.ndarray]:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 4
    rollout = sample(model, labels, torch.randn(n, 1, 8, 8, generator=gen), SAMPLER, gen, 1)
    rewards = rollout.images.flatten(1).mean(dim=1).numpy()  # any per-sample score
    groups = np.repeat(np.arange(n // 4), 4)
    return rollout, rewards, groups


def _backend(model: torch.nn.Module, **optim: float) -> FlowBackend:
    return FlowBackend(model, OptimConfig(lr=1e-3, **optim), SAMPLER)


def test_the_trainer_recomputes_the_rollout_log_probs_exactly_before_any_update():
    model = _model()
    rollout, rewards, groups = _batch(model)
    backend = _backend(model)
    recomputed = backend.log_probs(rollout)
    assert (recomputed - rollout.log_probs).abs().max() < 1e-6
    result = flow_train_step(
        backend, FlowGRPOConfig(), FlowTrainConfig(), rollout, rewards, groups, sampled_by=0, seed=0
    )
    assert result.metrics["mismatch/max_abs"] < 1e-6
    assert backend.version == 1


def test_micro_batches_accumulate_to_the_same_gradient_as_one_batch():
    grads = []
    for micro in (16, 3):
        model = _model()
        rollout, rewards, groups = _batch(model)
        backend = _backend(model)
        flow_train_step(
            backend,
            FlowGRPOConfig(),
            FlowTrainConfig(micro_batch_size=micro),
            rollout,
            rewards,
            groups,
            sampled_by=0,
            seed=0,
        )
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert grads[0].abs().max() > 0
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-7)


def test_an_update_raises_the_log_prob_of_positive_advantage_samples():
    model = _model()
    rollout, rewards, groups = _batch(model)
    backend = _backend(model)
    result = flow_train_step(
        backend, FlowGRPOConfig(clip_eps=0.2), FlowTrainConfig(), rollout, rewards, groups, sampled_by=0, seed=0
    )
    delta = (backend.log_probs(rollout) - rollout.log_probs).mean(dim=1)
    adv = torch.from_numpy(result.advantages)
    assert float((delta * adv).sum()) > 0  # the surrogate went up


def test_all_zero_advantages_with_the_filter_skip_the_update():
    model = _model()
    rollout, _, groups = _batch(model)
    backend = _backend(model)
    before = [p.detach().clone() for p in model.parameters()]
    result = flow_train_step(
        backend,
        FlowGRPOConfig(drop_zero_advantage=True),
        FlowTrainConfig(),
        rollout,
        np.full(16, 0.5, dtype=np.float32),
        groups,
        sampled_by=0,
        seed=0,
    )
    assert result.metrics["actor/skipped_all_zero_advantage"] == 1.0
    assert result.metrics["actor/trained_samples"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_non_finite_loss_raises_before_the_optimiser_step():
    model = _model()
    rollout, rewards, groups = _batch(model)
    bad = FlowRollout(
        rollout.labels, rollout.sigmas, rollout.window, rollout.latents.clone(), rollout.log_probs, rollout.images
    )
    bad.latents[0, 1] = float("inf")
    backend = _backend(model)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(NonFiniteError, match="actor/loss"):
        flow_train_step(backend, FlowGRPOConfig(), FlowTrainConfig(), bad, rewards, groups, sampled_by=0, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_checkpoint_continues_bit_for_bit():
    def run(split: bool) -> list[torch.Tensor]:
        model = _model()
        backend = _backend(model, lr_warmup_steps=3)
        for step in range(4):
            if split and step == 2:
                state = backend.state_dict()
                model = _model(seed=7)  # other weights: everything must come from the state
                backend = _backend(model, lr_warmup_steps=3)
                backend.load_state_dict(state)
            rollout, rewards, groups = _batch(backend.model, seed=10 + step)
            cfg = FlowTrainConfig(mini_batches_per_step=2)
            flow_train_step(backend, FlowGRPOConfig(), cfg, rollout, rewards, groups, sampled_by=step, seed=0)
        return [p.detach().clone() for p in backend.model.parameters()]

    for a, b in zip(run(False), run(True), strict=True):
        assert torch.equal(a, b)


def test_a_stale_batch_is_clipped_against_the_trainer_recompute_with_behaviour_weights():
    model = _model()
    rollout, rewards, groups = _batch(model)  # sampled by version 0
    backend = _backend(model)
    flow_train_step(backend, FlowGRPOConfig(), FlowTrainConfig(), *_batch(model, seed=5), sampled_by=0, seed=0)
    trainer = flow_train_step(
        backend, FlowGRPOConfig(), FlowTrainConfig(), rollout, rewards, groups, sampled_by=0, seed=0
    )
    assert trainer.metrics["actor/ratio"] == pytest.approx(1.0, abs=1e-6)  # the denominator is the trainer's own
    assert trainer.metrics["actor/behaviour_weight"] != pytest.approx(1.0, abs=1e-6)
    assert "mismatch/max_abs" not in trainer.metrics

    backend = _backend(_model())
    flow_train_step(backend, FlowGRPOConfig(), FlowTrainConfig(), *_batch(backend.model, seed=5), sampled_by=0, seed=0)
    rollout_old = flow_train_step(
        backend, FlowGRPOConfig(old_policy="rollout"), FlowTrainConfig(), rollout, rewards, groups, sampled_by=0, seed=0
    )
    assert rollout_old.metrics["actor/ratio"] != pytest.approx(1.0, abs=1e-6)
    assert "actor/behaviour_weight" not in rollout_old.metrics


def test_the_same_step_trains_a_diffusers_sd3_transformer_through_its_adapter():
    from flow_models.diffusers_adapter import SD3Velocity, tiny_sd3_transformer

    fn = SD3Velocity.with_random_prompts(tiny_sd3_transformer(seed=0, sample_size=8, in_channels=1), num_classes=4)
    gen = torch.Generator().manual_seed(3)
    labels = torch.arange(8) % 4
    rollout = sample(fn, labels, torch.randn(8, 1, 8, 8, generator=gen), SAMPLER, gen, 1)
    backend = FlowBackend(fn, OptimConfig(lr=1e-3), SAMPLER)
    before = [p.detach().clone() for p in fn.transformer.parameters()]
    rewards = rollout.images.flatten(1).mean(dim=1).numpy()
    result = flow_train_step(
        backend,
        FlowGRPOConfig(clip_eps=0.2),
        FlowTrainConfig(),
        rollout,
        rewards,
        np.repeat(np.arange(2), 4),
        sampled_by=0,
        seed=0,
    )
    assert result.metrics["mismatch/max_abs"] < 1e-6
    assert any(not torch.equal(a, b) for a, b in zip(before, fn.transformer.parameters(), strict=True))
    assert all(not b.requires_grad for b in fn.buffers())  # the prompt embeddings are not trained
