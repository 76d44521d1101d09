"""Routed-expert payloads as vLLM and SGLang send them, and the N-1 normalisation."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from engine_adapters.routing_rows import (
    decode_int32_base64,
    decode_npy_base64,
    expected_rows,
    normalise_rows,
    rows_from_positions,
)
from hypothesis import given
from hypothesis import strategies as st
from routing_state import RoutingSpec

SPEC = RoutingSpec(num_layers=3, top_k=2, num_experts=16)


def _npy_b64(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode()


def _rows(n: int, first: int = 0) -> np.ndarray:
    if n == 0:
        return np.zeros((0, 3, 2), dtype=np.uint8)
    return np.stack([np.full((3, 2), (first + i) % 16) for i in range(n)]).astype(np.uint8)


def test_npy_base64_round_trips_vllm_routed_experts() -> None:
    arr = _rows(7)
    np.testing.assert_array_equal(decode_npy_base64(_npy_b64(arr)), arr)


def test_npy_base64_rejects_pickles_garbage_and_wrong_rank() -> None:
    with pytest.raises(ValueError, match="base64"):
        decode_npy_base64("not base64 !!")
    with pytest.raises(ValueError, match=r"\.npy"):
        decode_npy_base64(base64.b64encode(b"hello").decode())
    with pytest.raises(ValueError, match="rows, layers, top_k"):
        decode_npy_base64(_npy_b64(np.zeros((4, 2), np.uint8)))
    obj = io.BytesIO()
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"\.npy"):
        decode_npy_base64(base64.b64encode(obj.getvalue()).decode())


def test_int32_base64_decodes_sglang_buffer_and_checks_its_size() -> None:
    arr = _rows(5).astype("<i4")
    got = decode_int32_base64(base64.b64encode(arr.tobytes()).decode(), SPEC)
    np.testing.assert_array_equal(got, arr)
    with pytest.raises(ValueError, match="multiple of 24 bytes"):
        decode_int32_base64(base64.b64encode(arr.tobytes()[:-4]).decode(), SPEC)


@given(c=st.integers(1, 40), g=st.integers(1, 40), data=st.data())
def test_normalise_keeps_n_minus_1_rows_and_drops_the_extra_last_row(c: int, g: int, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, c + g - 1))
    want = c + g - 1 - start
    assert expected_rows(c, g, start) == want
    exact = _rows(want, start)
    np.testing.assert_array_equal(normalise_rows(exact, SPEC, context_len=c, num_generated=g, start=start), exact)
    longer = _rows(want + 1, start)
    out = normalise_rows(longer, SPEC, context_len=c, num_generated=g, start=start)
    np.testing.assert_array_equal(out, longer[:want])
    assert out.dtype == SPEC.dtype


def test_normalise_rejects_any_other_row_count() -> None:
    for n in (3, 6):  # expected 4 (N-1) or 5 (N)
        with pytest.raises(ValueError, match="must return 4 rows"):
            normalise_rows(_rows(n), SPEC, context_len=3, num_generated=2, start=0)
    with pytest.raises(ValueError, match="num_generated"):
        expected_rows(3, 0, 0)
    with pytest.raises(ValueError, match="routed_experts_start"):
        expected_rows(3, 2, 5)


def test_rows_from_positions_slices_and_reports_incomplete_capture() -> None:
    full = _rows(10)
    got = rows_from_positions(full, SPEC, context_len=4, num_generated=5, start=2)
    np.testing.assert_array_equal(got, full[2:8])  # positions 2 .. 4+5-2
    assert rows_from_positions(full[:7], SPEC, context_len=4, num_generated=5, start=0) is None
    with pytest.raises(ValueError, match="expert ids"):
        rows_from_positions(full + 16, SPEC, context_len=4, num_generated=5, start=0)
