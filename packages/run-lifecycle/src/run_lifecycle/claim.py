"""The run directory a run claims: allocated or given, locked for the run's lifetime, with its config record."""

from __future__ import annotations

import datetime
import tomllib
from pathlib import Path
from typing import Any

from run_lifecycle import RunDir, RunLock, allocate_run_dir, from_dict, to_toml
from run_lifecycle.resume import record_resume


def claim_run_dir(cfg: Any, *, resume: bool, runs_root: Path) -> tuple[RunDir, RunLock]:
    """The run's directory, locked: a fresh one under `runs_root` when `run.dir` is empty (unique even for runs
    started in the same second), the given one otherwise. A new run writes `config.toml`; a resumed one keeps it and
    appends its overrides to `resumes.jsonl`. `cfg`: an app's typed config, with a `run` section (`RunConfig`)."""
    if cfg.run.dir:
        root = Path(cfg.run.dir).resolve()  # absolute: actors may run elsewhere
    else:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
        root = allocate_run_dir(runs_root.resolve(), stamp)
    lock = RunLock.acquire(root)
    run = RunDir.create(root)
    cfg.run.dir = str(root)
    if resume:
        saved = from_dict(type(cfg), tomllib.loads(run.config.read_text()), source=str(run.config))
        latest = run.latest_checkpoint()
        record_resume(root, saved, cfg, None if latest is None else int(latest.name))
    elif run.config.exists():
        lock.release()
        raise ValueError(f"{root}: expected a directory without a run, got one holding {run.config.name}")
    else:
        run.config.write_text(to_toml(cfg))
    return run, lock
