"""What a FlowGRPO run reports: its progress bar, `plots/training.png` (reward curves), `plots/before_after.png`
(`trainers.flow.pictures`) and the summary's classification accuracy."""

from __future__ import annotations

from dataclasses import dataclass

from run_lifecycle import Panel, Rows, RunReport, last_of

from trainers.flow.pictures import save_before_after_plot

PANELS = (
    Panel("reward (train batch mean, validation ODE sampler)", ("reward/mean", "val/reward/mean")),
    Panel("validation: classifier probability and accuracy", ("val/class_prob/mean", "val/class_acc")),
    Panel("policy loss / clip fraction", ("actor/pg_loss", "actor/clip_frac")),
    Panel("version lag of trained batches", ("rollout/version_lag",)),
)


@dataclass(frozen=True)
class FlowDetails:
    final_class_acc: float | None  # of the last validation: images classified as the class they were asked for

    @classmethod
    def of(cls, rows: Rows) -> FlowDetails:
        return cls(last_of(rows, "val/class_acc"))

    def line(self) -> str:
        return f"classified as requested {'n/a' if self.final_class_acc is None else f'{self.final_class_acc:.3f}'}"


def report(grid_per_class: int) -> RunReport[FlowDetails]:
    return RunReport(
        app="flow_grpo",
        score="val/reward/mean",
        score_label="val reward",
        progress_fields={"reward": "reward/mean", "val": "val/reward/mean", "img/s": "perf/images_per_s"},
        panels=PANELS,
        details=FlowDetails.of,
        more_plots=lambda run: save_before_after_plot(run, grid_per_class),
    )
