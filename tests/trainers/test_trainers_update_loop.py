"""run_update: epochs x mini-batches x micro-batches with one optimiser step per mini-batch, empty mini-batches
skipped and counted, a non-finite loss refused before its step and a non-finite grad norm reported after it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from trainers.algorithm.loss_io import LossOutputs
from trainers.step_metrics import NonFiniteError, StepMetrics
from trainers.update_loop import Backward, Position, run_update


class _Recorder:
    """A backend that records its calls; `norm` is the grad norm every optimiser step returns."""

    def __init__(self, norm: float = 1.0) -> None:
        self.calls: list[str] = []
        self.norm = norm

    def zero_grad(self) -> None:
        self.calls.append("zero_grad")

    def optimizer_step(self) -> torch.Tensor:
        self.calls.append("step")
        return torch.tensor(self.norm)


def _passes(backend: _Recorder, loss: float = 0.5) -> Callable[[Position, str], list[Backward]]:
    def backward(position: Position, micro: str) -> list[Backward]:
        backend.calls.append(f"{position.epoch}.{position.mini_batch}:{micro}")
        return [Backward(LossOutputs(torch.tensor(loss), means={"m": torch.tensor(loss)}), 2.0)]

    return backward


def test_each_epoch_runs_every_mini_batch_s_micro_batches_then_one_optimiser_step() -> None:
    backend, metrics = _Recorder(), StepMetrics()
    run_update(backend, [["a", "b"], ["c"]], 2, _passes(backend), metrics, step=1)
    one_epoch = ["zero_grad", "{e}.0:a", "{e}.0:b", "step", "zero_grad", "{e}.1:c", "step"]
    assert backend.calls == [c.format(e=e) for e in (0, 1) for c in one_epoch]
    assert metrics.result(step=1)["actor/optimizer_steps"] == 4.0


def test_an_empty_mini_batch_takes_no_step_and_is_counted() -> None:
    backend, metrics = _Recorder(), StepMetrics()
    run_update(backend, [[], ["a"]], 1, _passes(backend), metrics, step=1)
    assert backend.calls == ["zero_grad", "0.1:a", "step"]
    assert metrics.result(step=1)["actor/skipped_empty_mini_batches"] == 1.0


def test_a_non_finite_loss_raises_before_the_optimiser_step() -> None:
    backend = _Recorder()
    with pytest.raises(NonFiniteError, match=r"step 3, epoch 0, mini-batch 0: actor/loss is nan \(.*\['m'\]"):
        run_update(backend, [["a"]], 1, _passes(backend, float("nan")), StepMetrics(), step=3)
    assert "step" not in backend.calls


def test_a_non_finite_grad_norm_raises_after_the_optimiser_step() -> None:
    backend = _Recorder(norm=float("inf"))
    with pytest.raises(NonFiniteError, match="actor/grad_norm is inf") as caught:
        run_update(backend, [["a"], ["b"]], 1, _passes(backend), StepMetrics(), step=2)
    assert caught.value.metric == "actor/grad_norm" and backend.calls == ["zero_grad", "0.0:a", "step"]
