"""What a sync_ppo run reports: its progress bar, `plots/training.png` and the summary's mismatch means."""

from __future__ import annotations

from dataclasses import dataclass

from run_lifecycle import Panel, Rows, RunReport, mean_of


@dataclass(frozen=True)
class SyncDetails:
    """Train-vs-rollout mismatch, means over the run's steps (None when never measured)."""

    mismatch_replay: float | None  # whole batches, replayed
    mismatch_sample_replay: float | None  # the no-replay sample, replayed (like for like)
    mismatch_no_replay: float | None
    k3_replay: float | None
    k3_sample_replay: float | None
    k3_no_replay: float | None

    @classmethod
    def of(cls, rows: Rows) -> SyncDetails:
        m = "mismatch/{}/abs_diff_mean"
        kinds = ("replay", "sample_replay", "no_replay")
        return cls(*(mean_of(rows, m.format(k)) for k in kinds), *(mean_of(rows, f"mismatch/{k}/k3") for k in kinds))

    def line(self) -> str:
        def f(x: float | None) -> str:
            return "n/a" if x is None else format(x, ".2e")

        return (
            f"train/rollout mean |dlogp|: replay {f(self.mismatch_replay)} (all), sample "
            f"{f(self.mismatch_sample_replay)} replayed vs {f(self.mismatch_no_replay)} not; k3: replay "
            f"{f(self.k3_replay)} (all), sample {f(self.k3_sample_replay)} vs {f(self.k3_no_replay)}"
        )


REPORT = RunReport(
    app="sync_ppo",
    score="val/greedy_acc",
    score_label="greedy val acc",
    progress_fields={"reward": "reward/mean", "val_acc": "val/greedy_acc", "tok/s": "perf/step_tokens_per_s"},
    panels=(
        Panel("training reward / accuracy", ("reward/mean", "reward/acc")),
        Panel("validation accuracy", ("val/greedy_acc", "val-core/*")),
        Panel("train-vs-rollout |log-prob diff| (nats)", ("mismatch/*/abs_diff_mean",)),
        Panel("train-vs-rollout k3 KL", ("mismatch/*/k3",)),
        Panel("throughput (tokens/s)", ("perf/*tokens_per_s",)),
    ),
    details=SyncDetails.of,
)
