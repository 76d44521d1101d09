"""The async run's histograms, read back from its run directory: `plots/staleness.png` (how many versions old the
trained responses were) and `plots/lengths.png` (response lengths generated vs trained vs excluded as too stale)."""

from __future__ import annotations

from rollout_core import TrajectoryStatus
from run_lifecycle import RunDir, plot_histogram, plot_histograms
from trainers.dumps import read_dump

from async_pipeline.lengths import read_excluded, trained_lengths


def trained_staleness(run: RunDir) -> list[int]:
    """Per trained response (status ok) in the rollout dumps: step - 1 - its oldest token's version."""
    out = []
    for path in sorted((run.root / "rollouts").glob("*.jsonl")):
        for rec in read_dump(path):
            if rec.status is TrajectoryStatus.OK and rec.min_version is not None:
                out.append(rec.step - 1 - rec.min_version)
    return out


def save_histograms(run: RunDir) -> None:
    """Writes both plots (each only when it has values)."""
    values = trained_staleness(run)
    if values:
        title, xlabel = "staleness of trained responses", "policy version - oldest token's version"
        plot_histogram(values, run.plots / "staleness.png", title=title, xlabel=xlabel)
    trained = trained_lengths(run)
    excluded = [n for g in read_excluded(run) for n in g.response_lengths]
    if trained or excluded:
        series = {"generated": trained + excluded, "trained": trained, "excluded as too stale": excluded}
        title = "response lengths: generated vs trained vs excluded"
        plot_histograms(series, run.plots / "lengths.png", title=title, xlabel="response tokens")
