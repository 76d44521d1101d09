"""The end of a run: its PNG plots and its one-line summary.

Every app reports the same headline (steps, wall time, seed, its score on the base model and at the end, the run
directory) and adds its own fields (`Details`), computed from the rows of `metrics.jsonl`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from run_lifecycle import Panel, RunDir, plot_metrics, read_metrics

Rows = list[dict[str, object]]


class Details(Protocol):
    """An app's own summary fields."""

    def line(self) -> str:
        """The fields as a clause of the summary line."""
        ...


D = TypeVar("D", bound=Details)


@dataclass(frozen=True)
class RunReport(Generic[D]):
    """What an app reports. `score`: the metric of the headline (e.g. `val/greedy_acc`), shown as `score_label`;
    `progress_fields`: the progress bar's columns (label -> metric); `panels`: `plots/training.png`;
    `details`: the app's summary fields from the metrics rows; `more_plots`: the app's other pictures."""

    app: str
    score: str
    score_label: str
    progress_fields: Mapping[str, str]
    panels: Sequence[Panel]
    details: Callable[[Rows], D]
    more_plots: Callable[[RunDir], object] | None = None


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


@dataclass(frozen=True)
class RunSummary(Generic[D]):
    """`base`: the score on the base model (step 0); `final`: the last step's that measured it (None: never);
    `wall_s`: seconds of the loop over every resumed segment (start-up, shutdown and plots excluded)."""

    app: str
    score_label: str
    run_dir: Path
    steps: int
    seed: int
    wall_s: float
    base: float | None
    final: float | None
    details: D

    def line(self) -> str:
        gain = None if self.base is None or self.final is None else 100 * (self.final - self.base)
        return (
            f"{self.app}: {self.steps} steps in {self.wall_s:.0f} s (seed {self.seed}); {self.score_label} "
            f"{_fmt(self.base, '.3f')} -> {_fmt(self.final, '.3f')} ({_fmt(gain, '+.1f')} points); "
            f"{self.details.line()}; run dir {self.run_dir}"
        )


def _values(rows: Rows, key: str, *, min_step: int = 0) -> list[float]:
    return [float(v) for r in rows if isinstance(v := r.get(key), int | float) and int(r["step"]) >= min_step]  # type: ignore[call-overload]


def mean_of(rows: Rows, key: str) -> float | None:
    """The mean of `key` over the training steps (step 0, the base's validation, excluded); None when never logged."""
    values = _values(rows, key, min_step=1)
    return statistics.fmean(values) if values else None


def last_of(rows: Rows, key: str) -> float | None:
    """The value of `key` on the last line that has it (lines are in step order); None when never logged."""
    values = _values(rows, key)
    return values[-1] if values else None


def base_score(rows: Rows, key: str) -> float | None:
    """`key` on the line of step 0 (the base model's validation), None when it has none."""
    return next((float(v) for r in rows if r["step"] == 0 and isinstance(v := r.get(key), int | float)), None)


def summarize(run: RunDir, report: RunReport[D], *, seed: int, wall_s: float) -> RunSummary[D]:
    rows = read_metrics(run.metrics)
    return RunSummary(
        app=report.app,
        score_label=report.score_label,
        run_dir=run.root,
        steps=max((int(r["step"]) for r in rows), default=0),  # type: ignore[call-overload]
        seed=seed,
        wall_s=wall_s,
        base=base_score(rows, report.score),
        final=last_of(rows, report.score),
        details=report.details(rows),
    )


def write_plots(run: RunDir, report: RunReport[D]) -> None:
    """`plots/training.png` (the report's panels), then the app's other pictures."""
    plot_metrics(run.metrics, run.plots / "training.png", report.panels)
    if report.more_plots is not None:
        report.more_plots(run)
