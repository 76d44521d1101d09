"""Routed-expert rows as engines send them over HTTP, decoded and normalised to the N-1 convention (row i: the
experts chosen when token i was an input; a sequence of N tokens has rows 0..N-2).

A call whose input context has `C` tokens and that generated `G >= 1` tokens has rows for input positions
`0 .. C+G-2` (the last sampled token is never an input). An engine asked for rows from position `start` on
returns `C+G-1-start` rows. Engines that also return a row for the last token (`C+G-start` rows) have that row
dropped here; any other count is an error, never silently padded or cut.
"""

from __future__ import annotations

import base64
import binascii
import io

import numpy as np
from routing_state import RoutingSpec, coerce_rows


def expected_rows(context_len: int, num_generated: int, start: int) -> int:
    """Rows an N-1 engine returns for a call with context `context_len` that generated `num_generated` tokens."""
    if context_len < 1:
        raise ValueError(f"context_len: expected >= 1, got {context_len}")
    if num_generated < 1:
        raise ValueError(f"num_generated: expected >= 1 (a call without tokens has no rows), got {num_generated}")
    if not 0 <= start <= context_len + num_generated - 1:
        raise ValueError(f"routed_experts_start: expected in [0, {context_len + num_generated - 1}], got {start}")
    return context_len + num_generated - 1 - start


def decode_npy_base64(data: str) -> np.ndarray:
    """vLLM's HTTP form of `CompletionOutput.routed_experts`: a base64-encoded `.npy` file (no pickle)."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"routed_experts: expected base64 text of a .npy file, got undecodable data ({exc})") from exc
    try:
        arr = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"routed_experts: expected a .npy payload, got {len(raw)} bytes that np.load rejects") from exc
    if arr.ndim != 3:
        raise ValueError(f"routed_experts: expected a [rows, layers, top_k] array, got shape {list(arr.shape)}")
    return arr


def decode_int32_base64(data: str, spec: RoutingSpec) -> np.ndarray:
    """SGLang's `meta_info["routed_experts"]`: base64 of the raw little-endian int32 buffer `[rows, L, K]`."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"routed_experts: expected base64 of an int32 buffer, got undecodable data ({exc})") from exc
    per_row = 4 * spec.num_layers * spec.top_k
    if len(raw) % per_row:
        raise ValueError(
            f"routed_experts: expected a multiple of {per_row} bytes (int32 x {spec.num_layers} layers x "
            f"top_k {spec.top_k}), got {len(raw)}"
        )
    return np.frombuffer(raw, dtype="<i4").reshape(-1, spec.num_layers, spec.top_k)


def normalise_rows(
    rows: np.ndarray, spec: RoutingSpec, *, context_len: int, num_generated: int, start: int
) -> np.ndarray:
    """Rows for positions `start .. C+G-2` in the spec's dtype: N-1 rows pass, N rows lose the last one."""
    want = expected_rows(context_len, num_generated, start)
    got = int(rows.shape[0]) if rows.ndim else 0
    if got == want + 1:
        rows = rows[:want]
    elif got != want:
        raise ValueError(
            f"routed_experts: a call with context {context_len} that generated {num_generated} tokens, rows from "
            f"position {start}, must return {want} rows (N-1) or {want + 1} (N), got {got}"
        )
    return coerce_rows(rows, spec)


def rows_from_positions(
    full: np.ndarray, spec: RoutingSpec, *, context_len: int, num_generated: int, start: int
) -> np.ndarray | None:
    """Slices rows kept by absolute position (row i = input position i) to `start .. C+G-2`.

    Returns None when fewer than `C+G-1` positions were captured (e.g. an aborted call whose last forward pass
    never ran); extra trailing rows (a pass whose token was dropped by an abort) are cut.
    """
    want_end = context_len + num_generated - 1
    expected_rows(context_len, num_generated, start)
    if full.shape[0] < want_end:
        return None
    return coerce_rows(full[start:want_end], spec)
