"""What a FlowGRPO run reports: its progress bar, `plots/training.png` (reward curves), `plots/before_after.png`
and the summary's classification accuracy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flow_models.digits import NUM_CLASSES
from run_logging import Panel, RunDir, read_metrics
from run_loop import Rows, RunReport, last_of

from flow_grpo.pictures import save_before_after
from flow_grpo.validation import ValidationResult

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


def save_before_after_plot(run: RunDir, per_class: int) -> Path | None:
    """`plots/before_after.png` when step 0 and a later step were validated (and grids are on)."""
    folder = run.root / "validation"
    steps = sorted(int(p.stem.removeprefix("images_")) for p in folder.glob("images_*.npz"))
    if per_class == 0 or len(steps) < 2 or steps[0] != 0:
        return None
    by_step = {int(r["step"]): r for r in read_metrics(run.metrics)}  # type: ignore[call-overload]
    (_, before), (_, after) = ValidationResult.load_images(folder, 0), ValidationResult.load_images(folder, steps[-1])
    n = len(before) // NUM_CLASSES
    pick = [c * n + j for c in range(NUM_CLASSES) for j in range(per_class)]

    def title(step: int) -> str:
        value = by_step.get(step, {}).get("val/reward/mean")
        return f"step {step}" + ("" if value is None else f": val reward {float(value):.3f}")  # type: ignore[arg-type]

    return save_before_after(
        before[pick], after[pick], per_class, (title(0), title(steps[-1])), run.plots / "before_after.png"
    )


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
