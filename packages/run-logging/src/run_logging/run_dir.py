"""The run directory every app writes (layout documented in the README)."""

from __future__ import annotations

import os
import shutil
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

    def complete_checkpoints(self) -> list[Path]:
        """Checkpoint folders holding `COMPLETE`, oldest step first."""
        done = [p for p in self.checkpoints.glob("*") if p.name.isdigit() and (p / "COMPLETE").exists()]
        return sorted(done, key=lambda p: int(p.name))

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint (a folder holding `COMPLETE`), or None."""
        done = self.complete_checkpoints()
        return done[-1] if done else None

    def commit_checkpoint(self, staged: Path, step: int, *, keep: int) -> Path:
        """Renames the fully written folder `staged` to `checkpoints/<step>`, marks it `COMPLETE` last, then deletes
        all but the newest `keep` complete checkpoints. A crash at any point leaves the previous one in charge."""
        if keep < 1:
            raise ValueError(f"commit_checkpoint: expected keep >= 1, got {keep}")
        final = self.checkpoint(step)
        shutil.rmtree(final, ignore_errors=True)
        staged.rename(final)
        (final / "COMPLETE").write_text("")
        for old in self.complete_checkpoints()[:-keep]:
            shutil.rmtree(old)
        return final
