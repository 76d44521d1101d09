"""Rollout and validation dumps: one JSON line per sample, one file per step, crash-safe.

The caller names the file (a run directory keeps `rollouts/<step>.jsonl` and `validation/<step>.jsonl`, so the
training and validation dumps of one step never collide). A step file is written to a hidden temporary file in
the same directory, fsynced, and atomically renamed: a crash leaves either the previous complete file or none,
never a torn line. Writing the same path again replaces the file. Padding samples are refused.
JSON is UTF-8 without ASCII escaping; non-finite floats are refused (JSON has no NaN).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from rollout_core import Trajectory, TrajectoryStatus
from routing_state import RoutingTrace


def _finite(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not math.isfinite(float(value)):
        raise ValueError(f"DumpRecord.{name}: expected a finite float or None, got {value!r}")
    return float(value)


def _opt_int(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"DumpRecord.{name}: expected an int or None, got {value!r}")
    return int(value)


@dataclass
class DumpRecord:
    """One sample of one step. `log_probs` and `token_versions` have one entry per response token;
    `routing` is None for dense models. `reward`/`acc` are None only when the sample has no score (status
    error). Values are coerced to plain Python types, so `read_dump(write) == records` holds exactly."""

    step: int
    uid: str
    data_source: str
    prompt: str
    response: str
    prompt_ids: list[int]
    response_ids: list[int]
    reward: float | None
    acc: float | None
    ground_truth: str | None
    log_probs: list[float]
    token_versions: list[int]
    num_resumes: int
    status: TrajectoryStatus
    min_version: int | None
    max_version: int | None
    routing: RoutingTrace | None = None
    pred: str | None = None
    stop_reason: str | None = None
    num_preempted: int = 0
    advantage: float | None = None
    is_padding: bool = field(default=False)

    def __post_init__(self) -> None:
        if self.step < 0:
            raise ValueError(f"DumpRecord.step: expected >= 0, got {self.step}")
        self.status = TrajectoryStatus(self.status)
        self.prompt_ids = [int(t) for t in self.prompt_ids]
        self.response_ids = [int(t) for t in self.response_ids]
        self.token_versions = [int(v) for v in self.token_versions]
        self.log_probs = [_finite("log_probs", x) for x in self.log_probs]  # type: ignore[misc]
        self.reward, self.acc = _finite("reward", self.reward), _finite("acc", self.acc)
        self.advantage = _finite("advantage", self.advantage)
        self.min_version = _opt_int("min_version", self.min_version)
        self.max_version = _opt_int("max_version", self.max_version)
        n = len(self.response_ids)
        for name in ("log_probs", "token_versions"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"DumpRecord.{name} of {self.uid!r}: expected {n} entries (one per response token), "
                    f"got {len(getattr(self, name))}"
                )
        if self.routing is not None and not isinstance(self.routing, RoutingTrace):
            raise ValueError(f"DumpRecord.routing: expected a RoutingTrace or None, got {type(self.routing).__name__}")

    @classmethod
    def from_trajectory(
        cls,
        traj: Trajectory,
        *,
        step: int,
        uid: str,
        data_source: str,
        prompt: str,
        response: str,
        ground_truth: str | None,
        reward: float | None,
        acc: float | None,
        pred: str | None = None,
        advantage: float | None = None,
    ) -> DumpRecord:
        """Takes ids, log-probs, versions, routing and provenance from `traj`; texts and scores from the
        caller."""
        return cls(
            step=step,
            uid=uid,
            data_source=data_source,
            prompt=prompt,
            response=response,
            prompt_ids=list(traj.prompt_ids),
            response_ids=list(traj.response_ids),
            reward=reward,
            acc=acc,
            ground_truth=ground_truth,
            log_probs=list(traj.response_log_probs),
            token_versions=list(traj.token_versions),
            num_resumes=traj.num_resumes,
            status=traj.status,
            min_version=traj.min_version,
            max_version=traj.max_version,
            routing=traj.routing,
            pred=pred,
            stop_reason=str(traj.stop_reason),
            num_preempted=traj.num_preempted,
            advantage=advantage,
        )

    def to_json_dict(self) -> dict[str, object]:
        if self.is_padding:
            raise ValueError(f"DumpRecord {self.uid!r}: padding samples are never dumped, got is_padding=True")
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "is_padding"}
        out["status"] = str(self.status)
        out["routing"] = None if self.routing is None else self.routing.to_json_dict()
        return out

    @classmethod
    def from_json_dict(cls, d: Mapping[str, object]) -> DumpRecord:
        expected = {f.name for f in fields(cls)} - {"is_padding"}
        if set(d) != expected:
            raise ValueError(
                f"DumpRecord: expected keys {sorted(expected)}, missing {sorted(expected - set(d))}, "
                f"unknown {sorted(set(d) - expected)}"
            )
        kwargs = dict(d)
        routing = kwargs["routing"]
        kwargs["routing"] = None if routing is None else RoutingTrace.from_json_dict(routing)  # type: ignore[arg-type]
        return cls(**kwargs)  # type: ignore[arg-type]


def _encode(record: DumpRecord, step: int) -> str:
    if not isinstance(record, DumpRecord):
        raise ValueError(f"write_dump: expected DumpRecord items, got {type(record).__name__}")
    if record.step != step:
        raise ValueError(f"write_dump: record {record.uid!r} has step {record.step}, expected {step}")
    return json.dumps(record.to_json_dict(), ensure_ascii=False, allow_nan=False) + "\n"


def write_dump(path: str | Path, step: int, records: Iterable[DumpRecord]) -> Path:
    """Writes all records of step `step` to exactly `path`, atomically; returns the path. Raises ValueError (and
    writes nothing) if a record is padding, belongs to another step, or holds a non-finite float."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for record in records:
                f.write(_encode(record, step))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(final.parent)
    return final


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_dump(path: str | Path) -> list[DumpRecord]:
    """Every record of a dump file. Raises ValueError naming the line if one is torn (no final newline)
    or is not a valid record."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        raise ValueError(f"{path.name}: the last line is torn (no trailing newline); expected complete lines")
    out = []
    # split on "\n" only: str.splitlines would also split on U+2028 or U+0085 inside unescaped JSON strings
    for lineno, line in enumerate(text.split("\n")[:-1], start=1):
        try:
            out.append(DumpRecord.from_json_dict(json.loads(line)))
        except (json.JSONDecodeError, ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"{path.name} line {lineno}: not a valid dump record ({exc})") from exc
    return out
