"""RoutingTrace: append-only accumulation, replace, replay, missing, and exact round trips."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from routing_state import RoutingSpec, RoutingTrace

SPEC = RoutingSpec(num_layers=3, top_k=2, num_experts=64)


def rows_for(positions: range, version: int, spec: RoutingSpec = SPEC) -> np.ndarray:
    """Rows whose slot 0 is the position and slot 1 the version (readable provenance)."""
    out = np.zeros((len(positions), spec.num_layers, spec.top_k), dtype=np.int64)
    for i, p in enumerate(positions):
        out[i, :, 0] = p % spec.num_experts
        out[i, :, 1] = version % spec.num_experts
    return out


def test_extend_appends_only_positions_not_yet_recorded():
    trace = RoutingTrace(SPEC)
    assert trace.extend(rows_for(range(0, 5), 0), version=0) == 5
    # a resumed call re-prefills positions 0..7: only 5..7 are new
    assert trace.extend(rows_for(range(0, 8), 1), version=1) == 3
    got = trace.to_numpy()
    assert list(got[:, 0, 0]) == list(range(8))
    assert list(got[:, 0, 1]) == [0] * 5 + [1] * 3
    assert list(trace.versions) == [0] * 5 + [1] * 3


def test_extend_with_start_skips_overlap_and_counts_appended():
    trace = RoutingTrace(SPEC)
    trace.extend(rows_for(range(0, 4), 0), version=0)
    assert trace.extend(rows_for(range(2, 6), 1), version=1, start=2) == 2
    assert trace.extend(rows_for(range(4, 6), 2), version=2, start=4) == 0
    assert list(trace.versions) == [0, 0, 0, 0, 1, 1]


def test_extend_accepts_per_row_versions():
    trace = RoutingTrace(SPEC)
    trace.extend(rows_for(range(0, 4), 0), version=[3, 3, 4, 5])
    assert list(trace.versions) == [3, 3, 4, 5]


def test_replace_is_latest_call_wins():
    trace = RoutingTrace(SPEC)
    trace.extend(rows_for(range(0, 5), 0), version=0)
    assert trace.replace(rows_for(range(0, 7), 1), version=1) == 7
    assert list(trace.versions) == [1] * 7
    trace.replace(rows_for(range(3, 4), 2), version=2, start=3)
    assert len(trace) == 4 and list(trace.versions) == [1, 1, 1, 2]


def test_to_numpy_uses_uint8_up_to_256_experts_else_uint16():
    small = RoutingTrace(RoutingSpec(1, 1, 256))
    small.extend([[[255]]], version=0)
    assert small.to_numpy().dtype == np.uint8
    big = RoutingTrace(RoutingSpec(1, 1, 257))
    big.extend([[[256]]], version=0)
    assert big.to_numpy().dtype == np.uint16 and int(big.to_numpy()[0, 0, 0]) == 256


def test_replay_masks_positions_without_rows():
    trace = RoutingTrace(SPEC)
    trace.extend(rows_for(range(0, 3), 0), version=0)
    rows, mask = trace.replay(5)
    assert rows.shape == (5, 3, 2)
    assert list(mask) == [True, True, True, False, False]
    assert np.all(rows[3:] == 0)


def test_missing_lists_positions_without_rows_for_a_sequence():
    trace = RoutingTrace(SPEC)
    trace.extend(rows_for(range(0, 3), 0), version=0)
    assert trace.missing(4) == []  # 4 tokens need rows 0..2
    assert trace.missing(6) == [3, 4]
    assert RoutingTrace(SPEC).missing(1) == []


def test_rows_from_every_input_kind_are_equal():
    ref = rows_for(range(0, 3), 0)
    kinds = [ref, ref.astype(np.int32), ref.tolist(), (ref.astype(np.uint16).tobytes(), ref.shape, "uint16")]
    traces = []
    for rows in kinds:
        t = RoutingTrace(SPEC)
        t.extend(rows, version=0)
        traces.append(t)
    assert all(t == traces[0] for t in traces)


def test_torch_tensor_rows_are_accepted():
    torch = __import__("pytest").importorskip("torch")
    t = RoutingTrace(SPEC)
    t.extend(torch.tensor(rows_for(range(0, 2), 0)), version=0)
    assert len(t) == 2


def test_empty_rows_append_nothing():
    t = RoutingTrace(SPEC)
    assert t.extend([], version=0) == 0
    assert t.extend(np.zeros((0, 3, 2), dtype=np.int64), version=[]) == 0
    assert len(t) == 0


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=8),
    num_experts=st.sampled_from([8, 256, 300]),
)
def test_bytes_and_json_round_trip_exactly(chunks, num_experts):
    spec = RoutingSpec(num_layers=2, top_k=2, num_experts=num_experts)
    trace = RoutingTrace(spec)
    for version, (back, n) in enumerate(chunks):
        start = max(len(trace) - back, 0)
        rows = np.random.default_rng(version).integers(0, num_experts, size=(n, 2, 2))
        trace.extend(rows, version=version, start=start)
    again = RoutingTrace.from_bytes(trace.to_bytes())
    assert again == trace and again.to_numpy().dtype == trace.to_numpy().dtype
    assert RoutingTrace.from_json_dict(trace.to_json_dict()) == trace


@settings(max_examples=100, deadline=None)
@given(calls=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), min_size=1, max_size=10))
def test_extend_never_overwrites_and_keeps_first_version(calls):
    """Any sequence of overlapping calls: each position keeps the row of the first call that covered it."""
    trace = RoutingTrace(SPEC)
    first_version: dict[int, int] = {}
    for version, (back, n) in enumerate(calls):
        start = max(len(trace) - back, 0)
        appended = trace.extend(rows_for(range(start, start + n), version), version=version, start=start)
        for p in range(start, start + n):
            first_version.setdefault(p, version)
        assert appended == max(start + n - (len(trace) - appended), 0)
    got = trace.to_numpy()
    assert list(got[:, 0, 0]) == [p % 64 for p in range(len(trace))]  # no duplicated or shifted row
    assert list(trace.versions) == [first_version[p] for p in range(len(trace))]
    assert list(got[:, 0, 1]) == [first_version[p] % 64 for p in range(len(trace))]
