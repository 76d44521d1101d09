"""Response lengths of what the pipeline generated, trained and excluded as too stale: the length bias of async.

Generated = trained + excluded: every finished group either reaches the trainer or, under
`pipeline.staleness_policy rerun`, is discarded as too stale (its prompt runs again). Lengths are response tokens
per sample. Each step's excluded groups are written to `excluded/<step>.json` (atomically; a step without any
removes a file an earlier, resumed-over run left), so the plots and `benchmarks/length_bias.py` read the whole run.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from pathlib import Path

from run_lifecycle import RunDir
from trainers.dumps import read_dump

from async_pipeline.group import ExcludedGroup, FinishedGroup


def excluded_path(run: RunDir, step: int) -> Path:
    return run.root / "excluded" / f"{step}.json"


def write_excluded(run: RunDir, step: int, excluded: Sequence[ExcludedGroup]) -> None:
    path = excluded_path(run, step)
    if not excluded:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {"index": g.index, "min_version": g.min_version, "response_lengths": list(g.response_lengths)} for g in excluded
    ]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"step": step, "groups": rows}) + "\n")
    os.replace(tmp, path)


def read_excluded(run: RunDir) -> list[ExcludedGroup]:
    """Every excluded group of the run, in step order."""
    out: list[ExcludedGroup] = []
    paths = sorted((run.root / "excluded").glob("*.json"), key=lambda p: int(p.stem))
    for path in paths:
        for g in json.loads(path.read_text())["groups"]:
            out.append(ExcludedGroup(int(g["index"]), g["min_version"], tuple(int(n) for n in g["response_lengths"])))
    return out


def trained_lengths(run: RunDir) -> list[int]:
    """Response tokens of every response the trainer received (the rollout dumps, every status)."""
    return [
        len(rec.response_ids) for path in sorted((run.root / "rollouts").glob("*.jsonl")) for rec in read_dump(path)
    ]


def length_metrics(groups: Sequence[FinishedGroup], excluded: Sequence[ExcludedGroup]) -> dict[str, float]:
    """`staleness/{trained,generated,excluded}_len_mean` in response tokens per sample (excluded: only when a
    group was excluded this step) and `staleness/excluded_samples`."""
    trained = [n for g in groups for n in g.response_lengths]
    dropped = [n for g in excluded for n in g.response_lengths]
    out = {
        "staleness/trained_len_mean": statistics.fmean(trained) if trained else 0.0,
        "staleness/generated_len_mean": statistics.fmean(trained + dropped) if trained or dropped else 0.0,
        "staleness/excluded_samples": float(len(dropped)),
    }
    if dropped:
        out["staleness/excluded_len_mean"] = statistics.fmean(dropped)
    return out
