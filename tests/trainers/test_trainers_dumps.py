"""Dumps: exact round trip (routing included), atomic step files, refusal of pads and bad records."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_core import RoutingSpec, RoutingTrace, StopReason, Trajectory, TrajectoryStatus
from trainers.dumps import DumpRecord, read_dump, write_dump


def _trace(num_rows: int, num_experts: int = 8, seed: int = 0) -> RoutingTrace:
    rng = np.random.default_rng(seed)
    trace = RoutingTrace(RoutingSpec(num_layers=4, top_k=2, num_experts=num_experts))
    rows = rng.integers(0, num_experts, size=(num_rows, 4, 2))
    half = num_rows // 2
    trace.extend(rows[:half], version=3, start=0)
    trace.extend(rows, version=4, start=0)  # the first half keeps version 3
    return trace


def _record(step: int = 7, uid: str = "u0", routing: bool = True, **over: object) -> DumpRecord:
    prompt_ids, response_ids = [1, 5, 6, 7], [8, 9, 2]
    kwargs: dict[str, object] = dict(
        step=step,
        uid=uid,
        data_source="addition",
        prompt="12+3=",
        response="15",
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        reward=1.0,
        acc=1.0,
        ground_truth="15",
        log_probs=[-0.1, -1.0 / 3.0, -2.5e-7],
        token_versions=[3, 4, 4],
        num_resumes=1,
        status=TrajectoryStatus.OK,
        min_version=3,
        max_version=4,
        routing=_trace(len(prompt_ids) + len(response_ids) - 1) if routing else None,
        pred="15",
        stop_reason="stop",
        num_preempted=0,
        advantage=0.75,
    )
    kwargs.update(over)
    return DumpRecord(**kwargs)  # type: ignore[arg-type]


def test_round_trip_is_exact_with_routing_and_versions(tmp_path: Path) -> None:
    records = [
        _record(uid="a"),
        _record(
            uid="b", routing=False, reward=None, acc=None, status=TrajectoryStatus.ERROR, pred=None, advantage=None
        ),
    ]
    path = write_dump(tmp_path / "7.jsonl", 7, records)
    assert path == tmp_path / "7.jsonl"
    back = read_dump(path)
    assert back == records
    assert back[0].routing is not None and back[0].routing.versions.tolist() == records[0].routing.versions.tolist()
    assert back[0].routing.versions.tolist()[:3] == [3, 3, 3]


def test_each_line_has_the_required_keys_and_routing_json(tmp_path: Path) -> None:
    import json

    path = write_dump(tmp_path / "0.jsonl", 0, [_record(step=0)])
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 2
    row = json.loads(lines[0])
    required = {
        "step",
        "uid",
        "data_source",
        "prompt",
        "response",
        "prompt_ids",
        "response_ids",
        "reward",
        "acc",
        "ground_truth",
        "log_probs",
        "token_versions",
        "num_resumes",
        "status",
        "min_version",
        "max_version",
        "routing",
    }
    assert required <= set(row)
    assert set(row["routing"]) == {"data", "shape", "dtype", "versions", "num_experts"}
    assert row["routing"]["shape"] == [6, 4, 2] and row["routing"]["dtype"] == "uint8"
    assert "is_padding" not in row


@settings(max_examples=30, deadline=None)
@given(
    text=st.text(max_size=20),
    log_probs=st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=1, max_size=6),
)
def test_round_trip_exact_for_any_text_and_float(
    tmp_path_factory: pytest.TempPathFactory, text: str, log_probs: list[float]
) -> None:
    n = len(log_probs)
    rec = _record(
        prompt=text + "\u2028\x85",
        response=text,
        response_ids=list(range(n)),
        log_probs=log_probs,
        token_versions=[0] * n,
        routing=False,
    )
    directory = tmp_path_factory.mktemp("d")
    assert read_dump(write_dump(directory / "7.jsonl", 7, [rec])) == [rec]


def test_padding_record_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="padding"):
        write_dump(tmp_path / "1.jsonl", 1, [_record(step=1), _record(step=1, uid="pad", is_padding=True)])
    assert list(tmp_path.iterdir()) == []


def test_rewrite_after_a_failed_write_keeps_the_previous_complete_file(tmp_path: Path) -> None:
    first = [_record(uid="old")]
    write_dump(tmp_path / "7.jsonl", 7, first)
    with pytest.raises(ValueError, match="finite"):
        write_dump(tmp_path / "7.jsonl", 7, [_record(uid="new"), _record(uid="bad", reward=float("nan"))])
    assert read_dump(tmp_path / "7.jsonl") == first
    assert [p.name for p in tmp_path.iterdir()] == ["7.jsonl"]


def test_process_killed_mid_write_leaves_no_torn_line(tmp_path: Path) -> None:
    """A child process dies (os._exit) after writing half of step 7's records; step 7 keeps its old file."""
    write_dump(tmp_path / "7.jsonl", 7, [_record(uid="old")])
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_trainers_dumps import _record
        from trainers.dumps import write_dump

        def records():
            for i in range(200):
                if i == 100:
                    os._exit(3)
                yield _record(uid=f"new{{i}}")

        write_dump({str(tmp_path / "7.jsonl")!r}, 7, records())
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert [r.uid for r in read_dump(tmp_path / "7.jsonl")] == ["old"]
    # the dead writer's temporary file (".7.jsonl.tmp-PID") is not taken for a dump
    assert list(tmp_path.glob("[0-9]*.jsonl")) == [tmp_path / "7.jsonl"]


def test_reader_rejects_a_torn_last_line(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "7.jsonl", 7, [_record(uid="a"), _record(uid="b")])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    with pytest.raises(ValueError, match="torn"):
        read_dump(path)


def test_reader_rejects_a_record_with_missing_keys(tmp_path: Path) -> None:
    path = tmp_path / "1.jsonl"
    path.write_text('{"step": 1, "uid": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 1.*missing"):
        read_dump(path)


def test_record_of_another_step_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="step 3, expected 4"):
        write_dump(tmp_path / "4.jsonl", 4, [_record(step=3)])


def test_misaligned_log_probs_are_refused() -> None:
    with pytest.raises(ValueError, match=r"log_probs.*expected 3"):
        _record(log_probs=[-0.1])


def test_a_dump_replaces_only_its_own_file(tmp_path: Path) -> None:
    write_dump(tmp_path / "rollouts" / "2.jsonl", 2, [_record(step=2, uid="t")])
    write_dump(tmp_path / "validation" / "2.jsonl", 2, [_record(step=2, uid="v")])
    write_dump(tmp_path / "rollouts" / "10.jsonl", 10, [_record(step=10, uid="t10")])
    write_dump(tmp_path / "rollouts" / "2.jsonl", 2, [_record(step=2, uid="t2")])
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.jsonl")) == [
        "rollouts/10.jsonl",
        "rollouts/2.jsonl",
        "validation/2.jsonl",
    ]
    assert [r.uid for r in read_dump(tmp_path / "rollouts" / "2.jsonl")] == ["t2"]
    assert [r.uid for r in read_dump(tmp_path / "validation" / "2.jsonl")] == ["v"]


def test_from_trajectory_copies_provenance() -> None:
    trace = _trace(5)
    traj = Trajectory(
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5, 6],
        response_log_probs=[-0.5, -0.25, -1.0],
        token_versions=[3, 4, 4],
        loss_mask=[1, 1, 1],
        routing=trace,
        num_resumes=1,
        num_preempted=2,
        stop_reason=StopReason.STOP,
    )
    rec = DumpRecord.from_trajectory(
        traj, step=0, uid="u", data_source="sort", prompt="p", response="r", ground_truth="g", reward=0.0, acc=0.0
    )
    assert (rec.min_version, rec.max_version, rec.num_preempted, rec.stop_reason) == (3, 4, 2, "stop")
    assert rec.routing == trace and rec.log_probs == [-0.5, -0.25, -1.0]
