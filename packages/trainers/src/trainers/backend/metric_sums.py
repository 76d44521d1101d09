"""MetricSums: running token-weighted means, sums and maxima of the per-micro-batch loss metrics of a step."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class MetricSums:
    """Combines micro-batch metrics into one step's: token-weighted means by default, sums for losses that are
    already scaled by global denominators (their sum over micro-batches is the mini-batch loss; the result is
    the mean over optimiser steps), maxima for `*_max` keys."""

    def __init__(self) -> None:
        self._weighted: dict[str, float] = {}
        self._weights: dict[str, float] = {}
        self._sums: dict[str, float] = {}
        self._maxima: dict[str, float] = {}
        self._counts: dict[str, float] = {}
        self._grad_norms: list[float] = []

    def add_weighted(self, metrics: Mapping[str, float], tokens: int, *, sum_keys: Iterable[str] = (),
                     max_keys: Iterable[str] = ()) -> None:  # fmt: skip
        sums, maxima = set(sum_keys), set(max_keys)
        for key, value in metrics.items():
            if key in sums:
                self._sums[key] = self._sums.get(key, 0.0) + value
            elif key in maxima:
                self._maxima[key] = max(self._maxima.get(key, value), value)
            elif tokens > 0:
                self._weighted[key] = self._weighted.get(key, 0.0) + value * tokens
                self._weights[key] = self._weights.get(key, 0.0) + tokens

    def add_count(self, key: str) -> None:
        self._counts[key] = self._counts.get(key, 0.0) + 1.0

    def add_step(self, grad_norm: float) -> None:
        self._grad_norms.append(grad_norm)

    def result(self) -> dict[str, float]:
        steps = len(self._grad_norms)
        out = {k: v / self._weights[k] for k, v in self._weighted.items()}
        out |= {k: v / max(steps, 1) for k, v in self._sums.items()}
        out |= dict(self._maxima) | dict(self._counts)
        out["actor/optimizer_steps"] = float(steps)
        if steps:
            out["actor/grad_norm"] = sum(self._grad_norms) / steps
            out["actor/grad_norm_max"] = max(self._grad_norms)
        return out
