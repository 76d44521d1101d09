"""The run directory every app writes (layout documented in the README)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunDir:
    """`<root>/metrics.jsonl`, `config.toml`, `rollouts/<step>.jsonl`, `validation/<step>.jsonl`,
    `checkpoints/<step>/`, `plots/*.png`."""

    root: Path

    @classmethod
    def create(cls, root: str | os.PathLike[str]) -> RunDir:
        run = cls(Path(root))
        for sub in ("rollouts", "validation", "checkpoints", "plots"):
            (run.root / sub).mkdir(parents=True, exist_ok=True)
        return run

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def rollouts(self, step: int) -> Path:
        return self.root / "rollouts" / f"{step}.jsonl"

    def validation(self, step: int) -> Path:
        return self.root / "validation" / f"{step}.jsonl"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"{step}"

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint (a folder holding `COMPLETE`), or None."""
        done = [p for p in self.checkpoints.glob("*") if p.name.isdigit() and (p / "COMPLETE").exists()]
        return max(done, key=lambda p: int(p.name)) if done else None
