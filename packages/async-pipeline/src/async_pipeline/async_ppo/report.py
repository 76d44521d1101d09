"""What an async_ppo run reports: its progress bar, `plots/training.png`, the staleness and length histograms
(`async_pipeline.histograms`), and the summary's throughput, staleness and mismatch means."""

from __future__ import annotations

from dataclasses import dataclass

from run_lifecycle import Panel, Rows, RunReport, mean_of

from async_pipeline.histograms import save_histograms


@dataclass(frozen=True)
class AsyncDetails:
    """Means over the run's steps (None when never measured)."""

    samples_per_s: float | None  # trained samples / step wall time
    staleness_mean: float | None
    multi_version_frac: float | None  # of trained samples, the fraction whose tokens span > 1 version
    mismatch_replay: float | None  # tokens of the version the trainer holds (fresh ones)
    mismatch_no_replay: float | None
    behaviour_replay: float | None  # stale tokens, under the weights that sampled them (BehaviourProbe)
    behaviour_no_replay: float | None

    @classmethod
    def of(cls, rows: Rows) -> AsyncDetails:
        keys = ("perf/samples_per_s", "staleness/sample_mean", "staleness/multi_version_frac")
        kinds = ("sample_replay", "no_replay", "behaviour_replay", "behaviour_no_replay")
        return cls(*(mean_of(rows, k) for k in keys), *(mean_of(rows, f"mismatch/{k}/abs_diff_mean") for k in kinds))

    def line(self) -> str:
        def f(x: float | None, spec: str) -> str:
            return "n/a" if x is None else format(x, spec)

        return (
            f"{f(self.samples_per_s, '.0f')} samples/s; staleness mean {f(self.staleness_mean, '.2f')} versions, "
            f"{f(self.multi_version_frac, '.1%')} of samples span > 1 version; train/rollout mean |dlogp|, replay vs "
            f"not: fresh tokens {f(self.mismatch_replay, '.2e')} vs {f(self.mismatch_no_replay, '.2e')}, stale tokens "
            f"under their own version {f(self.behaviour_replay, '.2e')} vs {f(self.behaviour_no_replay, '.2e')}"
        )


REPORT = RunReport(
    app="async_ppo",
    score="val/greedy_acc",
    score_label="greedy val acc",
    progress_fields={
        "reward": "reward/mean",
        "val_acc": "val/greedy_acc",
        "stale": "staleness/sample_mean",
        "queue": "queue/ready_groups",
        "tok/s": "perf/rollout_tokens_per_s",
    },
    panels=(
        Panel("training reward / accuracy", ("reward/mean", "reward/acc")),
        Panel("validation accuracy", ("val/greedy_acc", "val-core/*")),
        Panel("staleness (weight versions)", ("staleness/sample_mean", "staleness/sample_max", "staleness/token_mean")),
        Panel("train-vs-rollout |log-prob diff| (nats)", ("mismatch/*/abs_diff_mean",)),
        Panel("response length (tokens)", ("staleness/*_len_mean",)),
        Panel("queue depth (groups)", ("queue/ready_groups", "queue/running_prompts")),
        Panel("throughput", ("perf/samples_per_s", "perf/rollout_tokens_per_s")),
    ),
    details=AsyncDetails.of,
    more_plots=save_histograms,
)
