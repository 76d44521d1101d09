"""The run directory every app writes (layout documented in the README), and its checkpoints' durability.

A checkpoint is staged in a hidden sibling folder (`checkpoints/.tmp-<step>`), then `commit_checkpoint` makes it
durable and visible in this order: every file and folder of the staged tree is fsynced; the folder is renamed to
`checkpoints/<step>` and `checkpoints/` is fsynced (the rename is on disk); `COMPLETE` is written and fsynced, and
so is the folder that holds it. Only folders holding `COMPLETE` are ever loaded, so a crash or a full disk at any
point leaves the previous complete checkpoint in charge. What such a failure leaves behind (a staging folder, or a
renamed folder without `COMPLETE`) is stale and is removed when the run next starts (`RunDir.create`).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

COMPLETE = "COMPLETE"
STAGING_PREFIX = ".tmp-"


def fsync_path(path: Path) -> None:
    """Flushes one file's or folder's data and metadata to the disk (a folder: its entries, e.g. a rename)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> int:
    """fsyncs every file and folder under `root` (deepest first, `root` last); returns how many were synced."""
    count = 0
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_path(Path(folder) / name)
            count += 1
        fsync_path(Path(folder))
        count += 1
    return count


@dataclass(frozen=True)
class RunDir:
    """`<root>/metrics.jsonl`, `config.toml`, `rollouts/<step>.jsonl`, `validation/<step>.jsonl`,
    `checkpoints/<step>/`, `plots/*.png`."""

    root: Path

    @classmethod
    def create(cls, root: str | os.PathLike[str]) -> RunDir:
        """Creates the layout (or keeps an existing one) and removes stale checkpoint folders
        (`remove_stale_checkpoints`). Call it from the process that owns the run (holding its `RunLock`): a second
        writer's staging folder would be deleted under it."""
        run = cls(Path(root))
        for sub in ("rollouts", "validation", "checkpoints", "plots"):
            (run.root / sub).mkdir(parents=True, exist_ok=True)
        run.remove_stale_checkpoints()
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
        done = [p for p in self.checkpoints.glob("*") if p.name.isdigit() and (p / COMPLETE).exists()]
        return sorted(done, key=lambda p: int(p.name))

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint (a folder holding `COMPLETE`), or None."""
        done = self.complete_checkpoints()
        return done[-1] if done else None

    def staging(self, step: int) -> Path:
        """The hidden folder a checkpoint of `step` is written to before `commit_checkpoint` (not created here)."""
        return self.checkpoints / f"{STAGING_PREFIX}{step}"

    def stale_checkpoints(self) -> list[Path]:
        """Folders under `checkpoints/` that are never loaded: staging folders (`.tmp-*`) and step folders without
        `COMPLETE` (a crash between the rename and the marker), sorted by name."""
        stale = [p for p in self.checkpoints.glob(f"{STAGING_PREFIX}*") if p.is_dir()]
        stale += [p for p in self.checkpoints.glob("*") if p.name.isdigit() and not (p / COMPLETE).exists()]
        return sorted(stale)

    def remove_stale_checkpoints(self) -> list[Path]:
        """Deletes `stale_checkpoints()` (what a crash or a full disk left mid-checkpoint); returns them."""
        stale = self.stale_checkpoints()
        for path in stale:
            shutil.rmtree(path)
        return stale

    def commit_checkpoint(self, staged: Path, step: int, *, keep: int) -> Path:
        """Makes the fully written folder `staged` the complete checkpoint `checkpoints/<step>` (the order is in the
        module docstring: everything fsynced before `COMPLETE`), then deletes all but the newest `keep` complete
        checkpoints. A crash or an OSError (a full disk) at any point leaves the previous one in charge."""
        if keep < 1:
            raise ValueError(f"commit_checkpoint: expected keep >= 1, got {keep}")
        if not staged.is_dir():
            raise ValueError(f"commit_checkpoint: expected a staged checkpoint folder, got no folder {staged}")
        final = self.checkpoint(step)
        fsync_tree(staged)
        shutil.rmtree(final, ignore_errors=True)
        staged.rename(final)
        fsync_path(self.checkpoints)
        marker = final / COMPLETE
        with marker.open("w") as f:
            f.flush()
            os.fsync(f.fileno())
        fsync_path(final)
        for old in self.complete_checkpoints()[:-keep]:
            (old / COMPLETE).unlink()  # first: a crash mid-delete leaves a stale folder, never a torn complete one
            shutil.rmtree(old)
        return final
