"""PNG plots of a run's metrics.jsonl (matplotlib, Agg backend; imported only when plotting)."""

from __future__ import annotations

import fnmatch
import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from run_lifecycle.metrics_log import read_metrics


@dataclass(frozen=True)
class Panel:
    """One subplot: every metric whose name matches one of `patterns` (fnmatch), plotted against step."""

    title: str
    patterns: tuple[str, ...]


def _series(rows: list[dict[str, object]], pattern: str) -> dict[str, tuple[list[int], list[float]]]:
    out: dict[str, tuple[list[int], list[float]]] = {}
    for row in rows:
        for name, value in row.items():
            if name != "step" and isinstance(value, int | float) and fnmatch.fnmatchcase(name, pattern):
                xs, ys = out.setdefault(name, ([], []))
                xs.append(int(row["step"]))  # type: ignore[arg-type]
                ys.append(float(value))
    return out


def _pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend, imported on first use (so `--help` never pays for it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: object, out_png: str | os.PathLike[str], *, title: str | None = None, xlabel: str | None = None) -> Path:
    """Writes `fig` (with a one-axes `title` and `xlabel` when given) as a 100-dpi PNG and closes it."""
    plt = _pyplot()
    if title is not None:
        (ax,) = fig.axes  # type: ignore[attr-defined]
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
    fig.tight_layout()  # type: ignore[attr-defined]
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)  # type: ignore[attr-defined]
    plt.close(fig)
    return out


def plot_metrics(
    metrics_path: str | os.PathLike[str], out_png: str | os.PathLike[str], panels: Sequence[Panel]
) -> Path:
    """Writes one PNG with a subplot per panel; panels without data say so instead of staying blank."""
    plt = _pyplot()
    rows = read_metrics(metrics_path)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        found = {}
        for pattern in panel.patterns:
            found.update(_series(rows, pattern))
        for name, (xs, ys) in sorted(found.items()):
            ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=name)
        if found:
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    return _save(fig, out_png)


def plot_histogram(values: Sequence[float], out_png: str | os.PathLike[str], *, title: str, xlabel: str) -> Path:
    """A histogram PNG (e.g. the staleness of trained tokens, in weight versions)."""
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(6, 3))
    arr = np.asarray(values, dtype=float)
    if arr.size:
        bins = np.arange(arr.min(), arr.max() + 2) - 0.5 if np.all(arr == np.round(arr)) else 30
        ax.hist(arr, bins=bins)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, out_png, title=title, xlabel=xlabel)


def plot_histograms(
    series: Mapping[str, Sequence[float]], out_png: str | os.PathLike[str], *, title: str, xlabel: str, bins: int = 40
) -> Path:
    """Overlaid step histograms of several samples on one set of bins, each normalised to its share (so series of
    different sizes compare by shape); the legend gives each series' size and mean."""
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(6, 3))
    arrays = {name: np.asarray(values, dtype=float) for name, values in series.items()}
    every = np.concatenate([a for a in arrays.values() if a.size] or [np.zeros(0)])
    if every.size:
        edges = np.histogram_bin_edges(every, bins=bins)
        for (name, a), style in zip(arrays.items(), itertools.cycle(("-", "--", ":", "-."))):
            if a.size:
                weights = np.full(a.size, 1.0 / a.size)
                label = f"{name} (n={a.size}, mean {a.mean():.1f})"
                ax.hist(a, bins=edges, weights=weights, histtype="step", linewidth=1.5, linestyle=style, label=label)
        ax.set_ylabel("share")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, out_png, title=title, xlabel=xlabel)
