"""TorchBackend: router replay closes the train/rollout gap, split-invariant updates, inert pads, exact resume.

Rollouts come from a plain uncached sampler over the same model (append-only routing rows, as an engine
records them), so this suite needs no engine; tests/sync_ppo repeats the mismatch check with the native engine.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models import MoEConfig, MoEForCausalLM
from routing_state import RoutingSpec, RoutingTrace
from trainers import TrainSample, collate, grpo_advantages, pad_to_multiple
from trainers.backend import BackendState, TorchBackend, TorchBackendConfig, TrainingBackend, split_by_token_budget

VOCAB = 24
PAD = 0
torch.set_num_threads(1)  # tiny matmuls: one intra-op thread is much faster on a shared 2-core machine


def tiny_model(seed: int = 0) -> MoEForCausalLM:
    torch.manual_seed(seed)
    cfg = MoEConfig.preset(
        "tiny", vocab_size=VOCAB, hidden_size=64, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=2,
        pad_token_id=PAD,
    )  # fmt: skip
    return MoEForCausalLM(cfg)


@torch.no_grad()
def sample_one(model: MoEForCausalLM, prompt: list[int], max_new: int, gen: torch.Generator) -> TrainSample:
    """Samples `max_new` tokens at temperature 1, recording each token's log-prob and routing rows append-only."""
    cfg = model.config
    trace = RoutingTrace(RoutingSpec(cfg.num_moe_layers, cfg.num_experts_per_tok, cfg.num_experts))
    ids, log_probs = list(prompt), []
    for _ in range(max_new):
        out = model(torch.tensor([ids]), capture_routing=True)
        logp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        token = int(torch.multinomial(logp.exp(), 1, generator=gen))
        trace.extend(out.routed_experts[0].numpy(), version=0, start=0)
        ids.append(token)
        log_probs.append(float(logp[token]))
    response = ids[len(prompt) :]
    return TrainSample(
        uid=f"u{len(prompt)}-{gen.initial_seed()}-{response}", group_id=str(prompt), data_source="toy",
        prompt_ids=list(prompt), response_ids=response, loss_mask=[1] * len(response), rollout_log_probs=log_probs,
        token_versions=[0] * len(response), reward=float(sum(response) % 3 == 0), routing=trace,
    )  # fmt: skip


def rollouts(model: MoEForCausalLM, num_prompts: int = 4, per_prompt: int = 3, seed: int = 0) -> list[TrainSample]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for p in range(num_prompts):
        prompt = [1 + (p + k) % (VOCAB - 1) for k in range(3 + p % 3)]
        out.extend(sample_one(model, prompt, max_new=3 + (p % 2) * 3, gen=gen) for _ in range(per_prompt))
    return out


def backend(model: MoEForCausalLM, **overrides: object) -> TorchBackend:
    cfg = TorchBackendConfig(**{"lr": 1e-2, "mismatch_sample_seqs": 4, **overrides})  # type: ignore[arg-type]
    return TorchBackend(model, cfg)


def test_torch_backend_satisfies_the_protocol() -> None:
    assert isinstance(backend(tiny_model()), TrainingBackend)


def test_replay_reproduces_rollout_log_probs_to_fp32_noise() -> None:
    model = tiny_model()
    batch = collate(rollouts(model), PAD)
    lp = backend(model).log_probs(batch, replay=True)
    diff = ((lp - batch.rollout_log_probs).abs() * batch.response_mask).sum() / batch.response_mask.sum()
    assert float(diff) < 2e-6  # fp32, identical weights: rounding only


def test_replay_shrinks_the_mismatch_when_the_trainer_router_differs() -> None:
    model = tiny_model()
    batch = collate(rollouts(model, num_prompts=6), PAD)
    trainer_model = tiny_model()
    with torch.no_grad():
        for name, p in trainer_model.named_parameters():  # perturbed routers stand in for kernel differences
            if name.endswith("mlp.gate.weight"):
                p.add_(torch.randn_like(p) * 0.5)
    b = backend(trainer_model)
    mask = batch.response_mask
    with_replay = float(((b.log_probs(batch, replay=True) - batch.rollout_log_probs).abs() * mask).sum())
    without = float(((b.log_probs(batch, replay=False) - batch.rollout_log_probs).abs() * mask).sum())
    assert with_replay < without


def test_train_step_reports_mismatch_with_and_without_replay_and_bumps_version() -> None:
    model = tiny_model()
    samples = rollouts(model)
    batch = collate(samples, PAD)
    b = backend(model)
    metrics = b.train_step(batch, grpo_advantages(batch.rewards, batch.group_ids))
    assert b.version == 1
    assert metrics["mismatch/replay/abs_diff_mean"] < 2e-6
    assert metrics["mismatch/replay/tokens"] == batch.num_loss_tokens
    assert metrics["mismatch/no_replay/tokens"] > 0
    assert metrics["mismatch/sample_replay/tokens"] == metrics["mismatch/no_replay/tokens"]
    assert metrics["mismatch/sample_replay/abs_diff_mean"] <= metrics["mismatch/no_replay/abs_diff_mean"] + 1e-7
    assert metrics["actor/optimizer_steps"] == 1.0


def _grads_of_step(budget: int, pad_to: int = 1) -> dict[str, torch.Tensor]:
    """The (clipped) gradient of one train_step; compared instead of weights because Adam's first step is
    ~lr·sign(g), which turns rounding noise in a near-zero gradient into an lr-sized weight difference."""
    data_model = tiny_model()
    samples = rollouts(data_model, num_prompts=4, per_prompt=2)
    samples = pad_to_multiple(samples, pad_to, pad_token_id=PAD)
    batch = collate(samples, PAD)
    model = tiny_model()
    b = backend(model, micro_batch_tokens=budget)
    b.train_step(batch, grpo_advantages(batch.rewards, batch.group_ids))
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_micro_batch_token_budget_does_not_change_the_update() -> None:
    whole = _grads_of_step(budget=10_000)
    split = _grads_of_step(budget=12)
    assert whole.keys() == split.keys() and len(whole) > 0
    for name, value in whole.items():
        torch.testing.assert_close(split[name], value, atol=1e-6, rtol=1e-4, msg=name)


def test_inert_padding_samples_do_not_change_the_update() -> None:
    plain = _grads_of_step(budget=10_000)
    padded = _grads_of_step(budget=10_000, pad_to=11)
    assert plain.keys() == padded.keys() and len(plain) > 0
    for name, value in plain.items():
        torch.testing.assert_close(padded[name], value, atol=1e-6, rtol=1e-4, msg=name)


def test_mini_batches_take_one_optimizer_step_each() -> None:
    model = tiny_model()
    batch = collate(rollouts(model, num_prompts=4, per_prompt=2), PAD)
    metrics = backend(model, mini_batches_per_step=4, ppo_epochs=2).train_step(
        batch, grpo_advantages(batch.rewards, batch.group_ids)
    )
    assert metrics["actor/optimizer_steps"] == 8.0


def test_state_dict_round_trip_continues_bit_for_bit(tmp_path) -> None:
    data = collate(rollouts(tiny_model(), num_prompts=4, per_prompt=2), PAD)
    adv = grpo_advantages(data.rewards, data.group_ids)
    first = backend(tiny_model())
    first.train_step(data, adv)
    first.state_dict().save(tmp_path / "ckpt")
    first.train_step(data, adv)
    second = backend(tiny_model(seed=5))  # different initial weights: everything must come from the checkpoint
    second.load_state_dict(BackendState.load(tmp_path / "ckpt"))
    assert second.version == 1
    second.train_step(data, adv)
    weights, version = first.export_weights()
    other, other_version = second.export_weights()
    assert version == other_version == 2
    for name, value in weights.items():
        assert (other[name] == value).all(), name


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.integers(1, 120))
def test_token_budget_split_covers_every_row_once_within_budget(lengths: list[int], budget: int) -> None:
    groups = split_by_token_budget(lengths, range(len(lengths)), budget)
    assert sorted(r for g in groups for r in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[r] for r in g) <= budget


def _grads_with(policy_loss: str, old_shift: float, **overrides: object) -> tuple[dict[str, torch.Tensor], dict]:
    """Gradient and metrics of one step with old log-probs = the rollout's + `old_shift` (a proximal policy)."""
    samples = rollouts(tiny_model(), num_prompts=4, per_prompt=2)
    batch = collate(samples, PAD)
    model = tiny_model()
    b = backend(model, policy_loss=policy_loss, **overrides)
    old = batch.rollout_log_probs + old_shift * batch.response_mask
    metrics = b.train_step(batch, grpo_advantages(batch.rewards, batch.group_ids), old)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, metrics


def test_decoupled_loss_equals_ppo_clip_when_proximal_equals_behaviour() -> None:
    plain, _ = _grads_with("ppo_clip", 0.0)
    decoupled, metrics = _grads_with("decoupled", 0.0)
    assert metrics["actor/behaviour_is_mean"] == pytest.approx(1.0)
    for name, value in plain.items():
        torch.testing.assert_close(decoupled[name], value, atol=1e-7, rtol=1e-5, msg=name)


def test_decoupled_loss_weights_by_proximal_over_behaviour_and_truncates_at_the_cap() -> None:
    plain, _ = _grads_with("ppo_clip", 0.1, grad_clip=1e9)
    decoupled, metrics = _grads_with("decoupled", 0.1, grad_clip=1e9)  # every token weighted exp(0.1)
    assert metrics["actor/behaviour_is_mean"] == pytest.approx(math.exp(0.1), rel=1e-5)
    for name, value in plain.items():
        torch.testing.assert_close(decoupled[name], value * math.exp(0.1), atol=1e-7, rtol=1e-4, msg=name)
    _, capped = _grads_with("decoupled", 0.1, is_cap=1.05)
    assert capped["actor/behaviour_is_mean"] == pytest.approx(1.05, rel=1e-6)


def test_decoupled_loss_without_recomputed_old_log_probs_is_an_error() -> None:
    samples = rollouts(tiny_model(), num_prompts=2, per_prompt=2)
    batch = collate(samples, PAD)
    b = backend(tiny_model(), policy_loss="decoupled")
    with pytest.raises(ValueError, match="expected recomputed old_log_probs"):
        b.train_step(batch, grpo_advantages(batch.rewards, batch.group_ids))


def test_mismatch_counts_only_tokens_sampled_by_the_weights_the_trainer_holds() -> None:
    model = tiny_model()
    samples = rollouts(model)
    stale = [dataclasses.replace(s, token_versions=[7] * len(s.token_versions)) for s in samples[:4]]
    batch = collate(stale + samples[4:], PAD)
    metrics = backend(model).train_step(batch, grpo_advantages(batch.rewards, batch.group_ids))
    fresh_tokens = sum(len(s.response_ids) for s in samples[4:])
    assert metrics["mismatch/replay/tokens"] == fresh_tokens < batch.num_loss_tokens
    assert metrics["mismatch/replay/abs_diff_mean"] < 2e-6


def test_the_no_replay_sample_skips_sequences_without_tokens_of_the_current_version() -> None:
    model = tiny_model()
    samples = rollouts(model)
    stale = [dataclasses.replace(s, token_versions=[7] * len(s.token_versions)) for s in samples]
    batch = collate(stale, PAD)
    metrics = backend(model).train_step(batch, grpo_advantages(batch.rewards, batch.group_ids))
    assert "mismatch/no_replay/tokens" not in metrics  # nothing to compare: no extra forward either
    assert metrics["mismatch/replay/tokens"] == 0
