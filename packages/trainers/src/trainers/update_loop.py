"""run_update: the loop every update shares (`trainers.step.train_step` for LMs, `trainers.flow.step` for flow
models): epochs x mini-batches x micro-batches, one optimiser step per mini-batch, and the non-finite checks.

    for epoch, mini-batch:                    one optimiser step each (none for a mini-batch without micro-batches)
        zero_grad
        for micro-batch: backward(position, micro) -> its backward passes' loss outputs and weights
        loss check                            the mini-batch's summed loss, before the optimiser step
        optimizer_step -> grad norm           the grad-norm check, after it (clip and step are one call)

What differs between algorithms is `backward`: it runs the forward and backward passes of one micro-batch with its
own loss. Gradients are scaled there, once: every loss divides by its mini-batch's global count (loss tokens or
samples, over all ranks), so the micro-batch gradients add up to the mini-batch's and this loop never rescales.
Metrics go to `StepMetrics` in the order the passes ran: means weighted by each pass's `weight`, sums added, one
grad norm per optimiser step.

Non-finite values raise `NonFiniteError` naming the step, the epoch and the mini-batch:
- a mini-batch's loss (`actor/loss`, the sum of its passes' losses in float64, with every non-finite loss metric
  listed) is checked after its backward and before its optimiser step, so that step is never taken (earlier
  mini-batches of the same update stay applied). Under data parallelism the ranks agree (one all-reduce of the
  verdict) and all raise together;
- the gradient norm (`actor/grad_norm`): the backend clips and steps in one call, so a non-finite norm with a
  finite loss is detected right after that step: the error says the weights in memory are not to be saved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

from trainers.algorithm.loss_io import LossOutputs
from trainers.backend.data_parallel import DataParallel
from trainers.step_metrics import NonFiniteError, StepMetrics

__all__ = ["Backward", "Optimised", "Position", "run_update"]

M = TypeVar("M")


class Optimised(Protocol):
    """The two calls of a backend the loop makes; its forward and backward passes are `backward`'s."""

    def zero_grad(self) -> None: ...

    def optimizer_step(self) -> torch.Tensor:
        """Clips, steps, returns the 0-dim gradient norm before clipping."""
        ...


@dataclass(frozen=True)
class Position:
    """Where the loop is: `epoch` (from 0) and `mini_batch` (its index in the update's mini-batches)."""

    epoch: int
    mini_batch: int

    @property
    def where(self) -> str:
        return f"epoch {self.epoch}, mini-batch {self.mini_batch}"


@dataclass(frozen=True)
class Backward:
    """One backward pass: its loss outputs (detached) and `weight`, its loss units (tokens or samples: the weight
    of its means in the step's)."""

    outputs: LossOutputs
    weight: float


def run_update(
    backend: Optimised,
    mini_batches: Sequence[Sequence[M]],
    epochs: int,
    backward: Callable[[Position, M], Sequence[Backward]],
    metrics: StepMetrics,
    *,
    step: int,
    dp: DataParallel | None = None,
) -> None:
    """`epochs` passes over `mini_batches` (each the micro-batches of one optimiser step, in order; an empty one has
    no loss unit on any rank: no forward, no step, counted in `actor/skipped_empty_mini_batches`). `backward(position,
    micro)` runs one micro-batch's passes (none for an inert one). `step` names the update in errors; `dp`: the
    data-parallel group whose ranks check the loss together (None: one process)."""
    for epoch in range(epochs):
        for i, micro_batches in enumerate(mini_batches):
            if not micro_batches:
                metrics.add_count("actor/skipped_empty_mini_batches")
                continue
            position = Position(epoch, i)
            backend.zero_grad()
            passes: list[Backward] = []
            for micro in micro_batches:
                for done in backward(position, micro):
                    metrics.add_micro(done.outputs, done.weight)
                    passes.append(done)
            _check_loss(passes, dp, step, position.where)
            grad_norm = backend.optimizer_step()
            metrics.add_step(grad_norm)
            _check_grad_norm(grad_norm, step, position.where)


def _check_loss(passes: Sequence[Backward], dp: DataParallel | None, step: int, where: str) -> None:
    """Raises `NonFiniteError` before the optimiser step when the mini-batch's loss is not finite on any rank (one
    host synchronisation, plus one all-reduce under data parallelism so every rank raises together)."""
    total = torch.stack([p.outputs.loss.detach().double() for p in passes]).sum() if passes else None
    bad = torch.zeros((), dtype=torch.float64) if total is None else (~torch.isfinite(total)).double()
    if dp is not None:
        bad = dp.sum(bad.reshape(1))[0]
    if not bool(bad):
        return
    # the means of a pass without loss units are never used (StepMetrics.add_micro): not culprits
    named = [
        (k, v)
        for p in passes
        for part in (p.outputs.sums, p.outputs.maxima, p.outputs.means if p.weight > 0 else {})
        for k, v in part.items()
    ]
    culprits = sorted({k for k, v in named if not bool(torch.isfinite(v))})
    value = "finite here, not finite on another rank" if total is None or bool(torch.isfinite(total)) else total.item()
    raise NonFiniteError(
        f"step {step}, {where}: actor/loss is {value} (non-finite metrics: {culprits or 'none'}), expected a finite "
        "loss. No optimiser step was taken on it: the weights and optimiser state are those before this mini-batch; "
        "resume from the last checkpoint",
        metric="actor/loss",
        step=step,
    )


def _check_grad_norm(grad_norm: torch.Tensor, step: int, where: str) -> None:
    """Raises `NonFiniteError` after the optimiser step when its gradient norm is not finite (the loss was)."""
    if not bool(torch.isfinite(grad_norm)):
        raise NonFiniteError(
            f"step {step}, {where}: actor/grad_norm is {float(grad_norm)} with a finite loss, expected a finite "
            "gradient norm. The backend clips and steps in one call, so this optimiser step was applied: the weights "
            "in memory may not be finite and must not be saved; resume from the last checkpoint",
            metric="actor/grad_norm",
            step=step,
        )
