"""TorchBackend (compute only): router replay closes the train/rollout gap, the reference policy is frozen,
weights leave in their own dtype, a checkpoint continues bit for bit, devices are resolved or refused clearly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainers import collate
from trainers.algorithm.loss_io import LossOutputs
from trainers.backend import BackendState, OptimConfig, TorchBackend, TrainingBackend
from trainers.backend.torch_backend import resolve_device
from trainers_fixtures import PAD, backend, rollouts, step, tiny_model

torch.set_num_threads(1)  # tiny matmuls: one intra-op thread is much faster on a shared 2-core machine


def _mean_abs(lp: torch.Tensor, batch) -> float:
    mask = batch.response_mask
    return float(((lp - batch.rollout_log_probs).abs() * mask).sum() / mask.sum())


def test_torch_backend_satisfies_the_protocol() -> None:
    assert isinstance(backend(tiny_model()), TrainingBackend)


def test_replay_reproduces_rollout_log_probs_to_fp32_noise() -> None:
    model = tiny_model()
    batch = collate(rollouts(model), PAD)
    (lp,) = backend(model).log_probs([batch], replay=True)
    assert _mean_abs(lp, batch) < 2e-6  # fp32, identical weights: rounding only


def test_replay_shrinks_the_mismatch_when_the_trainer_router_differs() -> None:
    batch = collate(rollouts(tiny_model(), num_prompts=6), PAD)
    trainer_model = tiny_model()
    with torch.no_grad():
        for name, p in trainer_model.named_parameters():  # perturbed routers stand in for kernel differences
            if name.endswith("mlp.gate.weight"):
                p.add_(torch.randn_like(p) * 0.5)
    b = backend(trainer_model)
    (with_replay,) = b.log_probs([batch], replay=True)
    (without,) = b.log_probs([batch], replay=False)
    assert _mean_abs(with_replay, batch) < _mean_abs(without, batch)


def test_the_reference_policy_keeps_the_base_weights_while_the_policy_trains() -> None:
    model = tiny_model()
    batch = collate(rollouts(model), PAD)
    b = backend(model, reference=True)
    (before,) = b.log_probs([batch], replay=True, role="reference")
    step(b, batch)
    (after,) = b.log_probs([batch], replay=True, role="reference")
    (policy,) = b.log_probs([batch], replay=True)
    assert torch.equal(before, after)
    assert _mean_abs(policy, batch) > 1e-4  # the policy moved (lr 1e-2), the reference did not


def test_a_reference_forward_without_a_reference_is_an_error() -> None:
    batch = collate(rollouts(tiny_model(), num_prompts=1, per_prompt=1), PAD)
    with pytest.raises(ValueError, match="reference"):
        backend(tiny_model()).log_probs([batch], replay=True, role="reference")


def test_exported_weights_are_cpu_tensors_in_their_own_dtype_without_the_tied_alias() -> None:
    model = tiny_model().to(torch.bfloat16)
    weights, version = TorchBackend(model, device="cpu").export_weights()
    assert (
        version == 0 and weights and all(w.dtype == torch.bfloat16 and w.device.type == "cpu" for w in weights.values())
    )
    weights["model.norm.weight"].add_(1.0)  # a copy: the model is untouched
    assert not torch.equal(weights["model.norm.weight"], model.model.norm.weight)


@pytest.mark.parametrize("kernel", ["auto", "fused"])
def test_state_dict_round_trip_continues_bit_for_bit(tmp_path: Path, kernel: str) -> None:
    data = collate(rollouts(tiny_model(), num_prompts=4, per_prompt=2), PAD)
    first = backend(tiny_model(), kernel=kernel)
    assert bool(first.optimizer.defaults["fused"]) == (kernel == "fused")  # auto: foreach below 10M parameters
    step(first, data)
    first.state_dict().save(tmp_path / "ckpt")
    step(first, data)
    second = backend(tiny_model(seed=5), kernel=kernel)  # other initial weights: all must come from the checkpoint
    second.load_state_dict(BackendState.load(tmp_path / "ckpt"))
    assert second.version == 1
    step(second, data)
    weights, version = first.export_weights()
    other, other_version = second.export_weights()
    assert version == other_version == 2
    for name, value in weights.items():
        assert torch.equal(other[name], value), name


def test_the_learning_rate_ramps_linearly_over_lr_warmup_steps_and_a_resume_goes_on_from_its_step(
    tmp_path: Path,
) -> None:
    data = collate(rollouts(tiny_model(), num_prompts=2, per_prompt=2), PAD)
    first = backend(tiny_model(), lr_warmup_steps=4)
    seen = []
    for _ in range(2):
        step(first, data)  # one optimiser step each (one mini-batch)
        seen.append(first.learning_rate)
    first.state_dict().save(tmp_path / "ckpt")
    resumed = backend(tiny_model(), lr_warmup_steps=4)
    resumed.load_state_dict(BackendState.load(tmp_path / "ckpt"))
    for _ in range(3):
        step(resumed, data)
        seen.append(resumed.learning_rate)
    assert seen == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2])


def test_optim_lr_at_is_the_ramp_and_a_bad_ramp_is_refused() -> None:
    assert [OptimConfig(lr=1.0, lr_warmup_steps=2).lr_at(n) for n in range(3)] == [0.5, 1.0, 1.0]
    assert OptimConfig(lr=1.0).lr_at(0) == 1.0
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=r"optim.lr_warmup_steps: expected an int >= 0"):
            OptimConfig(lr_warmup_steps=bad)  # type: ignore[arg-type]


def test_the_cosine_schedule_decays_after_the_ramp_to_min_lr_ratio_at_the_last_step() -> None:
    cfg = OptimConfig(lr=1.0, lr_warmup_steps=2, schedule="cosine", min_lr_ratio=0.1)
    lrs = [cfg.lr_at(n, total_steps=7) for n in range(9)]
    # ramp 0.5, 1.0; then cos over steps 2..6: 1, (1+cos(pi/4))/2, 1/2, (1+cos(3pi/4))/2, 0 -> 0.1 + 0.9 x that
    half = 0.5 * (1 + 2**-0.5)
    expected = [0.5, 1.0, 1.0, 0.1 + 0.9 * half, 0.55, 0.1 + 0.9 * (1 - half), 0.1, 0.1, 0.1]
    assert lrs == pytest.approx(expected)


def test_a_cosine_schedule_without_the_runs_steps_is_refused_when_the_backend_is_built() -> None:
    with pytest.raises(ValueError, match=r"optim.schedule cosine: expected the run's optimiser steps"):
        TorchBackend(tiny_model(), OptimConfig(schedule="cosine"))


def test_devices_resolve_to_cpu_here_and_cuda_without_a_gpu_is_refused() -> None:
    assert resolve_device("cpu").type == "cpu"
    if torch.cuda.is_available():
        assert resolve_device("auto").type == "cuda"
        return
    assert resolve_device("auto").type == "cpu"
    with pytest.raises(ValueError, match="no CUDA device"):
        resolve_device("cuda")


def test_bf16_compute_keeps_fp32_weights_and_gradients_and_gives_fp32_log_probs_near_the_fp32_ones():
    batch = collate(rollouts(tiny_model(), num_prompts=2, per_prompt=2), PAD)
    fp32 = TorchBackend(tiny_model(), device="cpu")
    bf16 = TorchBackend(tiny_model(), device="cpu", compute_dtype="bfloat16")
    (a,), (b,) = fp32.log_probs([batch], replay=True), bf16.log_probs([batch], replay=True)
    assert b.dtype == torch.float32
    mask = batch.response_mask.bool()
    diff = (a - b).abs()[mask]
    assert 0 < float(diff.max()) < 0.1  # bf16 rounding, not a different model
    out = bf16.forward_backward(batch, lambda lp, _: LossOutputs((lp * batch.response_mask).sum()), replay=True)
    assert torch.isfinite(out.loss)
    assert all(
        p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32
        for p in bf16.model.parameters()
        if p.requires_grad
    )
    with pytest.raises(ValueError, match="compute_dtype"):
        TorchBackend(tiny_model(), device="cpu", compute_dtype="float16")


def test_the_entropy_metric_is_the_response_tokens_mean_entropy_of_the_whole_logits() -> None:
    from moe_models.log_probs import next_token_entropy
    from trainers.aggregation import masked_mean

    model = tiny_model()
    batch = collate(rollouts(model), PAD)
    with torch.no_grad():
        want = masked_mean(next_token_entropy(model(batch.input_ids, batch.attention_mask).logits), batch.response_mask)

    def loss_fn(log_probs: torch.Tensor, at: torch.Tensor | None) -> LossOutputs:
        return LossOutputs((log_probs * batch.response_mask).sum(), {}, {}, {})

    out = backend(model).forward_backward(batch, loss_fn, replay=True)
    assert float(want) > 0
    assert float(out.means["actor/entropy"]) == pytest.approx(float(want), rel=1e-5)
