"""The end of a run: PNG plots (metrics, staleness histogram) and the one-line summary."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from rl_pipeline.lengths import read_excluded
from rollout_core import TrajectoryStatus
from run_logging import Panel, RunDir, plot_histogram, plot_histograms, plot_metrics, read_metrics
from trainers.dumps import read_dump

PANELS = (
    Panel("training reward / accuracy", ("reward/mean", "reward/acc")),
    Panel("validation accuracy", ("val/greedy_acc", "val-core/*")),
    Panel("staleness (weight versions)", ("staleness/sample_mean", "staleness/sample_max", "staleness/token_mean")),
    Panel("train-vs-rollout |log-prob diff| (nats)", ("mismatch/*/abs_diff_mean",)),
    Panel("response length (tokens)", ("staleness/*_len_mean",)),
    Panel("queue depth (groups)", ("queue/ready_groups", "queue/running_prompts")),
    Panel("throughput", ("perf/samples_per_s", "perf/rollout_tokens_per_s")),
)


@dataclass(frozen=True)
class RunSummary:
    run_dir: Path
    steps: int
    seed: int
    wall_s: float
    base_val_acc: float | None
    final_val_acc: float | None
    samples_per_s: float | None  # mean over steps of trained samples / step wall time
    staleness_mean: float | None
    multi_version_frac: float | None  # of trained samples, the fraction whose tokens span > 1 version
    mismatch_replay: float | None  # tokens of the version the trainer holds (fresh ones)
    mismatch_no_replay: float | None
    behaviour_replay: float | None  # stale tokens, under the weights that sampled them (BehaviourProbe)
    behaviour_no_replay: float | None

    def line(self) -> str:
        def f(x: float | None, spec: str) -> str:
            return "n/a" if x is None else format(x, spec)

        gain = None
        if self.base_val_acc is not None and self.final_val_acc is not None:
            gain = 100 * (self.final_val_acc - self.base_val_acc)
        return (
            f"async_ppo: {self.steps} steps in {self.wall_s:.0f} s (seed {self.seed}); greedy val acc "
            f"{f(self.base_val_acc, '.3f')} -> {f(self.final_val_acc, '.3f')} ({f(gain, '+.1f')} points); "
            f"{f(self.samples_per_s, '.0f')} samples/s; staleness mean {f(self.staleness_mean, '.2f')} versions, "
            f"{f(self.multi_version_frac, '.1%')} of samples span > 1 version; train/rollout mean |dlogp|, replay vs "
            f"not: fresh tokens {f(self.mismatch_replay, '.2e')} vs {f(self.mismatch_no_replay, '.2e')}, stale tokens "
            f"under their own version {f(self.behaviour_replay, '.2e')} vs {f(self.behaviour_no_replay, '.2e')}; "
            f"run dir {self.run_dir}"
        )


def _mean_of(rows: list[dict[str, object]], key: str) -> float | None:
    values = [float(v) for r in rows if isinstance(v := r.get(key), int | float) and int(r["step"]) > 0]  # type: ignore[arg-type]
    return statistics.fmean(values) if values else None


def summarize(run: RunDir, *, seed: int, wall_s: float, base_val_acc: float | None) -> RunSummary:
    rows = read_metrics(run.metrics)
    val = [r for r in rows if isinstance(r.get("val/greedy_acc"), int | float)]
    final = max(val, key=lambda r: int(r["step"])) if val else None  # type: ignore[arg-type]
    return RunSummary(
        run_dir=run.root,
        steps=max((int(r["step"]) for r in rows), default=0),  # type: ignore[arg-type]
        seed=seed,
        wall_s=wall_s,
        base_val_acc=base_val_acc,
        final_val_acc=float(final["val/greedy_acc"]) if final else None,  # type: ignore[arg-type]
        samples_per_s=_mean_of(rows, "perf/samples_per_s"),
        staleness_mean=_mean_of(rows, "staleness/sample_mean"),
        multi_version_frac=_mean_of(rows, "staleness/multi_version_frac"),
        mismatch_replay=_mean_of(rows, "mismatch/sample_replay/abs_diff_mean"),
        mismatch_no_replay=_mean_of(rows, "mismatch/no_replay/abs_diff_mean"),
        behaviour_replay=_mean_of(rows, "mismatch/behaviour_replay/abs_diff_mean"),
        behaviour_no_replay=_mean_of(rows, "mismatch/behaviour_no_replay/abs_diff_mean"),
    )


def trained_staleness(run: RunDir) -> list[int]:
    """Per trained response (status ok) in the rollout dumps: step - 1 - its oldest token's version."""
    out = []
    for path in sorted((run.root / "rollouts").glob("*.jsonl")):
        for rec in read_dump(path):
            if rec.status is TrajectoryStatus.OK and rec.min_version is not None:
                out.append(rec.step - 1 - rec.min_version)
    return out


def trained_lengths(run: RunDir) -> list[int]:
    """Response tokens of every response the trainer received (the rollout dumps, every status)."""
    return [
        len(rec.response_ids) for path in sorted((run.root / "rollouts").glob("*.jsonl")) for rec in read_dump(path)
    ]


def write_plots(run: RunDir) -> list[Path]:
    out = [plot_metrics(run.metrics, run.plots / "training.png", PANELS)]
    values = trained_staleness(run)
    if values:
        out.append(
            plot_histogram(
                values,
                run.plots / "staleness.png",
                title="staleness of trained responses",
                xlabel="policy version - oldest token's version",
            )
        )
    trained = trained_lengths(run)
    excluded = [n for g in read_excluded(run) for n in g.response_lengths]
    if trained or excluded:
        series = {"generated": trained + excluded, "trained": trained, "excluded as too stale": excluded}
        title = "response lengths: generated vs trained vs excluded"
        out.append(plot_histograms(series, run.plots / "lengths.png", title=title, xlabel="response tokens"))
    return out
