"""The end of a run: PNG plots of its metrics and the one-line summary."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from run_logging import Panel, RunDir, plot_metrics, read_metrics

PANELS = (
    Panel("training reward / accuracy", ("reward/mean", "reward/acc")),
    Panel("validation accuracy", ("val/greedy_acc", "val-core/*")),
    Panel("train-vs-rollout |log-prob diff| (nats)", ("mismatch/*/abs_diff_mean",)),
    Panel("train-vs-rollout k3 KL", ("mismatch/*/k3",)),
    Panel("throughput (tokens/s)", ("perf/*tokens_per_s",)),
)


@dataclass(frozen=True)
class RunSummary:
    """Headline numbers; the mismatch values are means over the run's steps (None when never measured)."""

    run_dir: Path
    steps: int
    seed: int
    wall_s: float
    base_val_acc: float | None
    final_val_acc: float | None
    mismatch_replay: float | None  # whole batches, replayed
    mismatch_sample_replay: float | None  # the no-replay sample, replayed (like for like)
    mismatch_no_replay: float | None
    k3_replay: float | None
    k3_sample_replay: float | None
    k3_no_replay: float | None

    def line(self) -> str:
        def f(x: float | None, spec: str) -> str:
            return "n/a" if x is None else format(x, spec)

        gain = (
            None
            if self.base_val_acc is None or self.final_val_acc is None
            else 100 * (self.final_val_acc - self.base_val_acc)
        )
        return (
            f"sync_ppo: {self.steps} steps in {self.wall_s:.0f} s (seed {self.seed}); greedy val acc "
            f"{f(self.base_val_acc, '.3f')} -> {f(self.final_val_acc, '.3f')} ({f(gain, '+.1f')} points); "
            f"train/rollout mean |dlogp|: replay {f(self.mismatch_replay, '.2e')} (all), sample "
            f"{f(self.mismatch_sample_replay, '.2e')} replayed vs {f(self.mismatch_no_replay, '.2e')} not; k3: replay "
            f"{f(self.k3_replay, '.2e')} (all), sample {f(self.k3_sample_replay, '.2e')} vs "
            f"{f(self.k3_no_replay, '.2e')}; run dir {self.run_dir}"
        )


def _mean_of(rows: list[dict[str, object]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if isinstance(r.get(key), int | float) and int(r["step"]) > 0]
    return statistics.fmean(values) if values else None


def summarize(run: RunDir, *, seed: int, wall_s: float, base_val_acc: float | None) -> RunSummary:
    rows = read_metrics(run.metrics)
    val_rows = [r for r in rows if isinstance(r.get("val/greedy_acc"), int | float)]
    return RunSummary(
        run_dir=run.root,
        steps=max((int(r["step"]) for r in rows), default=0),
        seed=seed,
        wall_s=wall_s,
        base_val_acc=base_val_acc,
        final_val_acc=float(val_rows[-1]["val/greedy_acc"]) if val_rows else None,
        mismatch_replay=_mean_of(rows, "mismatch/replay/abs_diff_mean"),
        mismatch_sample_replay=_mean_of(rows, "mismatch/sample_replay/abs_diff_mean"),
        mismatch_no_replay=_mean_of(rows, "mismatch/no_replay/abs_diff_mean"),
        k3_replay=_mean_of(rows, "mismatch/replay/k3"),
        k3_sample_replay=_mean_of(rows, "mismatch/sample_replay/k3"),
        k3_no_replay=_mean_of(rows, "mismatch/no_replay/k3"),
    )


def write_plots(run: RunDir) -> Path:
    return plot_metrics(run.metrics, run.plots / "training.png", PANELS)
