"""Every ValueError of routing_state states what it got and what it expected."""

import numpy as np
import pytest
from routing_state import RoutingSpec, RoutingTrace

SPEC = RoutingSpec(num_layers=2, top_k=2, num_experts=16)


def ok_rows(n: int) -> np.ndarray:
    return np.zeros((n, 2, 2), dtype=np.int64)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_layers": 0, "top_k": 1, "num_experts": 4}, "num_layers: expected a positive int, got 0"),
        ({"num_layers": 1, "top_k": 5, "num_experts": 4}, r"top_k: expected <= num_experts \(4\), got 5"),
        ({"num_layers": 1, "top_k": 1, "num_experts": 70000}, "num_experts: expected <= 65536, got 70000"),
        ({"num_layers": True, "top_k": 1, "num_experts": 4}, "num_layers: expected a positive int"),
    ],
)
def test_bad_spec_is_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RoutingSpec(**kwargs)


def test_trace_needs_a_spec():
    with pytest.raises(ValueError, match="expected a RoutingSpec, got tuple"):
        RoutingTrace((2, 2, 16))  # type: ignore[arg-type]


def test_gap_is_rejected():
    t = RoutingTrace(SPEC)
    t.extend(ok_rows(2), version=0)
    with pytest.raises(ValueError, match=r"positions 2..2 would be missing \(a gap\); expected start <= 2, got 3"):
        t.extend(ok_rows(1), version=0, start=3)
    with pytest.raises(ValueError, match="expected start <= 2, got 5"):
        t.replace(ok_rows(1), version=0, start=5)


def test_negative_start_is_rejected():
    with pytest.raises(ValueError, match="start: expected an int >= 0, got -1"):
        RoutingTrace(SPEC).extend(ok_rows(1), version=0, start=-1)


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (
            np.zeros((2, 3, 2), dtype=np.int64),
            r"expected shape \[n, 2, 2\] \(rows, layers, top_k\), got \[2, 3, 2\]",
        ),
        (np.zeros((2, 2), dtype=np.int64), r"got \[2, 2\]"),
        (np.zeros((2, 2, 2), dtype=np.float32), "expected an integer dtype, got float32"),
        (np.zeros((2, 2, 2), dtype=bool), "expected an integer dtype, got bool"),
        (np.full((1, 2, 2), 16), r"expected expert ids in \[0, 16\), got 16"),
        (np.full((1, 2, 2), -1), r"expected expert ids in \[0, 16\), got -1"),
        ((b"\x00" * 3, (1, 2, 2), "uint8"), "expected 4 bytes for shape"),
        ("rows", "expected a numpy array, a torch tensor, a nested list or"),
    ],
)
def test_bad_rows_are_rejected(rows, match):
    with pytest.raises(ValueError, match=match):
        RoutingTrace(SPEC).extend(rows, version=0)


@pytest.mark.parametrize(
    ("version", "match"),
    [
        ([0, 1, 2], r"expected one version per row \(2\), got 3"),
        (-1, "version: expected >= 0, got -1"),
        ([0, -2], "version: expected >= 0, got -2"),
        (True, "expected an int or a sequence of ints"),
        ([0.5, 1.0], "expected an int or a 1-d sequence of ints"),
    ],
)
def test_bad_versions_are_rejected(version, match):
    with pytest.raises(ValueError, match=match):
        RoutingTrace(SPEC).extend(ok_rows(2), version=version)


def test_replay_shorter_than_trace_is_rejected():
    t = RoutingTrace(SPEC)
    t.extend(ok_rows(4), version=0)
    with pytest.raises(ValueError, match="expected seq_len >= 4, got 3"):
        t.replay(3)


def test_missing_with_too_many_rows_is_rejected():
    t = RoutingTrace(SPEC)
    t.extend(ok_rows(4), version=0)
    with pytest.raises(ValueError, match="a sequence of 4 tokens has at most 3 rows, got a trace with 4"):
        t.missing(4)
    with pytest.raises(ValueError, match="num_tokens: expected >= 0, got -1"):
        t.missing(-1)


def test_corrupt_bytes_are_rejected():
    t = RoutingTrace(SPEC)
    t.extend(ok_rows(2), version=0)
    data = t.to_bytes()
    with pytest.raises(ValueError, match="expected data starting with"):
        RoutingTrace.from_bytes(b"XXXX" + data[4:])
    with pytest.raises(ValueError, match="expected format version 1, got 9"):
        RoutingTrace.from_bytes(data[:4] + bytes([9]) + data[5:])
    with pytest.raises(ValueError, match="payload bytes, got"):
        RoutingTrace.from_bytes(data[:-1])


def test_json_dict_with_bad_shape_is_rejected():
    d = RoutingTrace(SPEC).to_json_dict()
    d["shape"] = [0, 2]
    with pytest.raises(ValueError, match=r"expected shape \[rows, layers, top_k\], got \[0, 2\]"):
        RoutingTrace.from_json_dict(d)
