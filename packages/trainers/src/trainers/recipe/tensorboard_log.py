"""TensorBoard mirror of metrics.jsonl, used only when the `tensorboard` package is installed."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path


class TensorBoardLog:
    """Writes each step's float metrics as scalars under `<run>/tensorboard`."""

    def __init__(self, directory: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(directory))

    @classmethod
    def open_if_installed(cls, directory: Path) -> TensorBoardLog | None:
        """None when `tensorboard` is not importable (metrics.jsonl stays the record of the run)."""
        return cls(directory) if importlib.util.find_spec("tensorboard") is not None else None

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, float(value), step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
