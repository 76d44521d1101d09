"""A non-finite loss, advantage or gradient norm stops train_step with an error naming the step and the metric; a
non-finite loss or advantage never reaches the weights or the optimiser state."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from trainers import TrainBatch, collate
from trainers.algorithm import Algorithm, LossInputs, LossOutputs
from trainers.backend import TorchBackend
from trainers.estimators import Advantages
from trainers.step_metrics import NonFiniteError
from trainers_fixtures import PAD, algorithm, backend, rollouts, step, tiny_model

torch.set_num_threads(1)


@dataclasses.dataclass
class Faulty:
    """Wraps an algorithm: `loss_fault` replaces the loss of the optimiser steps it names (counted from 0) with
    `nan` or `inf_grad` (value 0, infinite gradient); `nan_advantage_row` makes that sample's advantages NaN."""

    inner: Algorithm
    loss_fault: str = ""
    faulty_steps: tuple[int, ...] = ()
    nan_advantage_row: int | None = None
    calls: int = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def advantages(self, batch: TrainBatch, old: torch.Tensor | None, ref: torch.Tensor | None) -> Advantages:
        adv = self.inner.advantages(batch, old, ref)
        if self.nan_advantage_row is None:
            return adv
        tokens, per_sample = adv.tokens.clone(), adv.per_sample.clone()
        tokens[self.nan_advantage_row] = float("nan")
        per_sample[self.nan_advantage_row] = float("nan")
        return Advantages(tokens, per_sample, adv.metrics)

    def loss(self, inputs: LossInputs) -> LossOutputs:
        out = self.inner.loss(inputs)
        index, self.calls = self.calls, self.calls + 1  # one micro-batch per optimiser step in these tests
        if index not in self.faulty_steps:
            return out
        if self.loss_fault == "nan":
            nan = out.loss * float("nan")
            return LossOutputs(nan, out.means, {**out.sums, "actor/pg_loss": nan}, out.maxima)
        assert self.loss_fault == "inf_grad"
        zero = (inputs.log_probs - inputs.log_probs.detach()).sum()  # value 0, gradient 1 per token
        return LossOutputs(torch.sqrt(zero.abs()), out.means, out.sums, out.maxima)  # sqrt'(0) = inf


def _state(b: TorchBackend) -> dict[str, torch.Tensor]:
    state = b.state_dict()
    return {k: v.clone() for k, v in state.tensors.items() if not k.startswith("rng.")}


def _assert_same(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> None:
    assert before.keys() == after.keys()
    for name, value in before.items():
        assert torch.equal(after[name], value), name


def _batch() -> TrainBatch:
    return collate(rollouts(tiny_model(), 4, 2), PAD)


def _warm_backend() -> TorchBackend:
    """A backend after one clean update, so its optimiser holds moments a bad step could corrupt."""
    b = backend(tiny_model())
    step(b, _batch())
    return b


def test_a_nan_loss_stops_the_step_before_its_optimizer_step_and_names_the_step_and_metric() -> None:
    b = _warm_backend()
    before = _state(b)
    with pytest.raises(NonFiniteError, match=r"step 2, epoch 0, mini-batch 0: actor/loss is nan.*actor/pg_loss") as e:
        step(b, _batch(), Faulty(algorithm(), "nan", (0,)))
    print(f"injected: a NaN loss at step 2; raised: {e.value}")
    assert (e.value.metric, e.value.step) == ("actor/loss", 2)
    _assert_same(before, _state(b))  # weights and optimiser moments untouched
    assert b.version == 1


def test_a_nan_loss_in_a_later_mini_batch_keeps_the_earlier_steps_and_takes_none_on_it() -> None:
    b = _warm_backend()
    before = _state(b)
    with pytest.raises(NonFiniteError, match=r"step 2, epoch 0, mini-batch 1: actor/loss is nan"):
        step(b, _batch(), Faulty(algorithm(), "nan", (1,)), mini_batches_per_step=2)
    after = _state(b)
    assert any(not torch.equal(after[k], v) for k, v in before.items())  # mini-batch 0's step was applied ...
    assert all(bool(torch.isfinite(v).all()) for v in after.values())  # ... mini-batch 1's NaN step was not
    assert b.version == 1


def test_nan_advantages_stop_the_step_before_any_optimizer_step() -> None:
    b = _warm_backend()
    before = _state(b)
    batch = _batch()
    with pytest.raises(NonFiniteError, match=r"step 2: advantages are not finite for 1 samples") as e:
        step(b, batch, Faulty(algorithm(), nan_advantage_row=3))
    assert e.value.metric == "advantages" and batch.uids[3] in str(e.value)
    _assert_same(before, _state(b))


def test_an_infinite_grad_norm_with_a_finite_loss_is_an_error_naming_the_grad_norm() -> None:
    b = _warm_backend()
    with pytest.raises(NonFiniteError, match=r"step 2, epoch 0, mini-batch 0: actor/grad_norm is (inf|nan)") as e:
        step(b, _batch(), Faulty(algorithm(), "inf_grad", (0,)))
    assert e.value.metric == "actor/grad_norm" and "must not be saved" in str(e.value)


def test_a_finite_step_is_unchanged_by_the_checks() -> None:
    a, c = backend(tiny_model()), backend(tiny_model())
    ma = step(a, _batch()).metrics
    mc = step(c, _batch(), Faulty(algorithm())).metrics  # the wrapper with no fault is the same algorithm
    assert ma == mc and a.version == c.version == 1
    _assert_same(_state(a), _state(c))
