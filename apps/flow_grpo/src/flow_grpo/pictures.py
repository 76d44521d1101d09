"""The run's pictures (matplotlib, Agg): a grid of validation images per validation (`plots/samples_<step>.png`:
one row per class, the same seeds every time) and the base next to the final model (`plots/before_after.png`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flow_models.digits import IMAGE_SIZE, NUM_CLASSES

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
