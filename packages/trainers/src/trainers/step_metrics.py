"""StepMetrics: one step's metrics, accumulated as device tensors and turned into floats once, at the end.

Combination rules: micro-batch `means` are weighted by their loss tokens (a host-side count); `sums` are added over
micro-batches and divided by the number of optimiser steps (their sum over a mini-batch is its loss, the result
the mean over optimiser steps); `maxima` keep the largest; grad norms give `actor/grad_norm` (mean) and
`actor/grad_norm_max`. Accumulation is in float64, in the order the values arrive, so a result does not depend on
where the device synchronises. A NaN metric (other than `mismatch/*`) is a `NonFiniteError` naming the metric and
the step.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import torch

from trainers.algorithm.loss_io import LossOutputs
from trainers.backend.data_parallel import DataParallel

MISMATCH_TOKENS = "/tokens"


class NonFiniteError(ValueError):
    """A loss, gradient norm, advantage or metric of an update that is not a finite number. `metric` names it;
    `step` is the update (`backend.version + 1` before it: the step that turns weights `step - 1` into `step`)."""

    def __init__(self, message: str, *, metric: str, step: int) -> None:
        super().__init__(message)
        self.metric, self.step = metric, step

    def __reduce__(self) -> tuple[object, tuple[str]]:
        """Picklable (rank processes send it to the driver): its fields are keyword-only."""
        return functools.partial(NonFiniteError, metric=self.metric, step=self.step), (str(self),)


class StepMetrics:
    def __init__(self) -> None:
        self._weighted: dict[str, torch.Tensor] = {}
        self._weights: dict[str, float] = {}
        self._sums: dict[str, torch.Tensor] = {}
        self._maxima: dict[str, torch.Tensor] = {}
        self._counts: dict[str, float] = {}
        self._grad_norms: list[torch.Tensor] = []
        self._values: dict[str, torch.Tensor | float] = {}

    def add_micro(self, out: LossOutputs, tokens: float) -> None:
        """A micro-batch's loss outputs; `tokens`: its loss tokens (weights of its means)."""
        for key, value in out.sums.items():
            previous = self._sums.get(key)
            self._sums[key] = value.double() if previous is None else previous + value.double()
        for key, value in out.maxima.items():
            previous = self._maxima.get(key)
            self._maxima[key] = value.double() if previous is None else torch.maximum(previous, value.double())
        if tokens > 0:
            for key, value in out.means.items():
                previous = self._weighted.get(key)
                term = value.double() * tokens
                self._weighted[key] = term if previous is None else previous + term
                self._weights[key] = self._weights.get(key, 0.0) + tokens

    def add_count(self, key: str) -> None:
        self._counts[key] = self._counts.get(key, 0.0) + 1.0

    def add_step(self, grad_norm: torch.Tensor) -> None:
        self._grad_norms.append(grad_norm.detach())

    def add(self, values: Mapping[str, torch.Tensor | float]) -> None:
        """Step-level values (already final: mismatch, advantages, learning rate, ...)."""
        self._values.update(values)

    def reduce_over(self, dp: DataParallel) -> None:
        """Under data parallelism each rank accumulated its own rows' micro-batches: combine them, so that every
        rank's result covers the whole batch. Token-weighted means and sums add over ranks (a loss sum is each
        rank's share of `sum / global count`), maxima take the largest; step-level values, counts and grad norms
        are already global. A key some rank never saw (no loss token in its share) counts as empty there."""
        kinds = {"mean": self._weighted, "sum": self._sums, "max": self._maxima}
        every = dp.union([f"{kind}:{key}" for kind, part in kinds.items() for key in part])  # one collective
        weighted, sums, maxima = ([n.split(":", 1)[1] for n in every if n.startswith(f"{kind}:")] for kind in kinds)
        zero = torch.zeros((), dtype=torch.float64)
        packed = torch.stack(
            [self._weighted.get(k, zero).detach().double().cpu() for k in weighted]
            + [torch.tensor(self._weights.get(k, 0.0), dtype=torch.float64) for k in weighted]
            + [self._sums.get(k, zero).detach().double().cpu() for k in sums]
        )
        total = dp.sum(packed).cpu() if packed.numel() else packed
        n = len(weighted)
        self._weighted = {k: total[i] for i, k in enumerate(weighted) if float(total[n + i]) > 0}
        self._weights = {k: float(total[n + i]) for i, k in enumerate(weighted) if float(total[n + i]) > 0}
        self._sums = {k: total[2 * n + i] for i, k in enumerate(sums)}
        if maxima:
            low = torch.tensor(float("-inf"), dtype=torch.float64)
            top = dp.max_of(torch.stack([self._maxima.get(k, low).detach().double().cpu() for k in maxima])).cpu()
            self._maxima = dict(zip(maxima, top, strict=True))

    def result(self, *, step: int) -> dict[str, float]:
        """Every metric as a float, with one transfer to the host. A mismatch prefix that compared no token keeps
        only its count (`<prefix>/tokens` = 0). `step` names the update in a `NonFiniteError`."""
        steps = len(self._grad_norms)
        out: dict[str, torch.Tensor | float] = {k: v / self._weights[k] for k, v in self._weighted.items()}
        out |= {k: v / max(steps, 1) for k, v in self._sums.items()}
        out |= dict(self._maxima) | dict(self._counts)
        out["actor/optimizer_steps"] = float(steps)
        if steps:
            total = self._grad_norms[0].double()
            for g in self._grad_norms[1:]:
                total = total + g.double()
            out["actor/grad_norm"] = total / steps
            out["actor/grad_norm_max"] = torch.stack([g.double() for g in self._grad_norms]).max()
        out |= self._values
        floats = _to_floats(out)
        nan = sorted(k for k, v in floats.items() if math.isnan(v) and not k.startswith("mismatch/"))
        if nan:
            raise NonFiniteError(
                f"step {step}: metric {nan[0]} is NaN (a loss or statistic diverged; all NaN: {nan}), expected a "
                "number. The step's optimiser steps were applied: resume from the last checkpoint",
                metric=nan[0],
                step=step,
            )
        empty = [k[: -len(MISMATCH_TOKENS)] for k, v in floats.items() if k.endswith(MISMATCH_TOKENS) and v == 0]
        return {
            k: v
            for k, v in floats.items()
            if not any(k.startswith(p + "/") and k != p + MISMATCH_TOKENS for p in empty)
        }


def _to_floats(values: Mapping[str, torch.Tensor | float]) -> dict[str, float]:
    """Python floats; tensors are stacked per device and read with one `tolist` each."""
    out = {k: float(v) for k, v in values.items() if not isinstance(v, torch.Tensor)}
    by_device: dict[torch.device, list[str]] = {}
    for k, v in values.items():
        if isinstance(v, torch.Tensor):
            by_device.setdefault(v.device, []).append(k)
    for keys in by_device.values():
        stacked = torch.stack([values[k].detach().reshape(()).double() for k in keys])  # type: ignore[union-attr]
        out |= dict(zip(keys, stacked.tolist(), strict=True))
    return out
