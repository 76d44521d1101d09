"""The run's pictures (matplotlib, Agg): a grid of validation images per validation (`plots/samples_<step>.png`:
one row per class, the same seeds every time) and the base next to the final model (`plots/before_after.png`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flow_models.digits import IMAGE_SIZE, NUM_CLASSES
from run_lifecycle import RunDir, read_metrics

from trainers.flow.validation import FlowValidationResult

GAP = 0.12  # intensity of the 1-pixel lines between images (0 is the paper colour, 1 full ink)


def tile(images: np.ndarray, per_class: int) -> np.ndarray:
    """`[C * n, 1, 8, 8]` class-major -> `[C * 9 - 1, per_class * 9 - 1]` in [0, 1] (1-pixel gaps)."""
    n = len(images) // NUM_CLASSES
    s = IMAGE_SIZE + 1
    out = np.full((NUM_CLASSES * s - 1, per_class * s - 1), GAP, dtype=np.float32)
    unit = np.clip((images[:, 0] + 1) / 2, 0, 1)
    for c in range(NUM_CLASSES):
        for j in range(per_class):
            out[c * s : c * s + IMAGE_SIZE, j * s : j * s + IMAGE_SIZE] = unit[c * n + j]
    return out


def _figure(panels: list[tuple[str, np.ndarray]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 4), squeeze=False)
    for ax, (title, grid) in zip(axes[0], panels, strict=True):
        ax.imshow(grid, cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_yticks(
            [c * (IMAGE_SIZE + 1) + IMAGE_SIZE / 2 for c in range(NUM_CLASSES)], [str(c) for c in range(NUM_CLASSES)]
        )
        ax.set_xticks([])
        ax.set_ylabel("requested class")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def save_grid(images: np.ndarray, per_class: int, title: str, path: Path) -> Path:
    return _figure([(title, tile(images, per_class))], path)


def save_before_after(
    before: np.ndarray, after: np.ndarray, per_class: int, titles: tuple[str, str], path: Path
) -> Path:
    return _figure([(titles[0], tile(before, per_class)), (titles[1], tile(after, per_class))], path)


def _first_per_class(images: np.ndarray, per_class: int) -> np.ndarray:
    """The first `per_class` images of each class of a class-major `[C * n, ...]` array."""
    n = len(images) // NUM_CLASSES
    return images[[c * n + j for c in range(NUM_CLASSES) for j in range(per_class)]]


def save_samples(result: FlowValidationResult, per_class: int, path: Path) -> Path:
    """`plots/samples_<step>.png`: the first `per_class` validation images of each class."""
    title = f"step {result.step}: val reward {result.metrics['val/reward/mean']:.3f}"
    return save_grid(_first_per_class(result.images, per_class), per_class, title, path)


def save_before_after_plot(run: RunDir, per_class: int) -> Path | None:
    """`plots/before_after.png` when step 0 and a later step were validated (and grids are on)."""
    folder = run.root / "validation"
    steps = sorted(int(p.stem.removeprefix("images_")) for p in folder.glob("images_*.npz"))
    if per_class == 0 or len(steps) < 2 or steps[0] != 0:
        return None
    by_step = {int(r["step"]): r for r in read_metrics(run.metrics)}  # type: ignore[call-overload]
    (_, before), (_, after) = (
        FlowValidationResult.load_images(folder, 0),
        FlowValidationResult.load_images(folder, steps[-1]),
    )

    def title(step: int) -> str:
        value = by_step.get(step, {}).get("val/reward/mean")
        return f"step {step}" + ("" if value is None else f": val reward {float(value):.3f}")  # type: ignore[arg-type]

    return save_before_after(
        _first_per_class(before, per_class),
        _first_per_class(after, per_class),
        per_class,
        (title(0), title(steps[-1])),
        run.plots / "before_after.png",
    )
