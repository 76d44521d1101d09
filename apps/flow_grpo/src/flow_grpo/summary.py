"""The end of a run: its pictures and the one-line summary."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flow_models.digits import NUM_CLASSES
from run_logging import RunDir, read_metrics

from flow_grpo.pictures import save_before_after, save_reward_curves
from flow_grpo.validation import ValidationResult


@dataclass(frozen=True)
class FlowSummary:
    """`wall_s`: seconds of the training loop, the base's validation and every step (what a resume adds to);
    start-up (caches, Ray, the rollouter actor), shutdown and the plots are not in it."""

    run_dir: Path
    steps: int
    seed: int
    wall_s: float
    base_val_reward: float
    final_val_reward: float | None
    final_class_acc: float | None

    def line(self) -> str:
        final = "n/a" if self.final_val_reward is None else f"{self.final_val_reward:.3f}"
        gain = (
            "n/a" if self.final_val_reward is None else f"{100 * (self.final_val_reward - self.base_val_reward):+.1f}"
        )
        acc = "n/a" if self.final_class_acc is None else f"{self.final_class_acc:.3f}"
        return (
            f"flow_grpo: {self.steps} steps in {self.wall_s:.0f} s (seed {self.seed}); val reward "
            f"{self.base_val_reward:.3f} -> {final} ({gain} points); classified as requested {acc}; "
            f"run dir {self.run_dir}"
        )


def _last(rows: list[dict[str, object]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]
    return values[-1] if values else None


def summarize(run: RunDir, *, seed: int, wall_s: float, base_val_reward: float) -> FlowSummary:
    rows = read_metrics(run.metrics)
    last = max((int(r["step"]) for r in rows), default=0)  # type: ignore[call-overload]
    return FlowSummary(
        run.root, last, seed, wall_s, base_val_reward, _last(rows, "val/reward/mean"), _last(rows, "val/class_acc")
    )


def write_plots(run: RunDir, per_class: int) -> None:
    """`plots/reward.png` always; `plots/before_after.png` when step 0 and a later step were validated."""
    save_reward_curves(run.metrics, run.plots / "reward.png")
    folder = run.root / "validation"
    steps = sorted(int(p.stem.removeprefix("images_")) for p in folder.glob("images_*.npz"))
    if per_class == 0 or len(steps) < 2 or steps[0] != 0:
        return
    rows = read_metrics(run.metrics)
    by_step = {int(r["step"]): r for r in rows}  # type: ignore[call-overload]
    (_, before), (_, after) = ValidationResult.load_images(folder, 0), ValidationResult.load_images(folder, steps[-1])
    n = len(before) // NUM_CLASSES
    pick = [c * n + j for c in range(NUM_CLASSES) for j in range(per_class)]

    def title(step: int) -> str:
        value = by_step.get(step, {}).get("val/reward/mean")
        return f"step {step}" + ("" if value is None else f": val reward {float(value):.3f}")  # type: ignore[arg-type]

    save_before_after(
        before[pick], after[pick], per_class, (title(0), title(steps[-1])), run.plots / "before_after.png"
    )
