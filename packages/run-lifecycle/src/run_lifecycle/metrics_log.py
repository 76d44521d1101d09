"""metrics.jsonl: one line per step, `step` plus flat metric names; crash-safe appends."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def _clean(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf; a missing value reads back as None
    if hasattr(value, "item"):
        return _clean(value.item())  # numpy / torch scalars
    return value


class MetricsLog:
    """Appends `{"step": s, **metrics}` lines. Each line is written with one `write` and flushed, so a crash
    can leave at most one unterminated last line, which `read_metrics` ignores."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, step: int, metrics: dict[str, float | int | None]) -> None:
        bad = [k for k in metrics if not isinstance(k, str) or k == "step"]
        if bad:
            raise ValueError(f"metrics: expected string names other than 'step', got {bad}")
        line = json.dumps({"step": int(step), **{k: _clean(v) for k, v in metrics.items()}}, sort_keys=False)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def truncate_after(self, step: int) -> int:
        """Drops lines of steps > `step` (resuming from a checkpoint at `step`); returns how many were dropped."""
        rows = read_metrics(self.path)
        keep = [r for r in rows if int(r["step"]) <= step]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in keep), encoding="utf-8")
        os.replace(tmp, self.path)
        return len(rows) - len(keep)


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, object]]:
    """All complete lines of a metrics file (an unterminated last line from a crash is skipped)."""
    p = Path(path)
    if not p.exists():
        return []
    text = p.read_text(encoding="utf-8")
    lines = text.split("\n")
    complete = lines[:-1]  # the part after the last newline is empty or torn
    return [json.loads(line) for line in complete if line.strip()]
