"""RoutingTrace: the routed experts of one sequence, one row per input position, each tagged with a version.

Invariants (the routing rule: row i holds the experts chosen when token i was an input):
- rows cover positions `0 .. len-1` contiguously; row `i` holds the experts chosen when token `i` was an input,
  i.e. in the forward pass that produced the distribution of token `i+1`;
- `extend` is append-only by position: a call never overwrites a row it does not add, so every row keeps the
  weight version of the forward pass that first produced it;
- a finished sequence of `N` tokens has exactly `N-1` rows (the last token is never an input).
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence

import numpy as np

from routing_state.rows import RowsLike, coerce_rows, coerce_versions
from routing_state.spec import RoutingSpec

_MAGIC = b"RTRC"
_FORMAT_VERSION = 1


class RoutingTrace:
    """Routing rows for positions `0..len(self)-1` and one int64 weight version per row."""

    def __init__(self, spec: RoutingSpec) -> None:
        if not isinstance(spec, RoutingSpec):
            raise ValueError(f"RoutingTrace: expected a RoutingSpec, got {type(spec).__name__}")
        self.spec = spec
        self._rows = np.zeros((0, *spec.row_shape), dtype=spec.dtype)
        self._versions = np.zeros(0, dtype=np.int64)
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"RoutingTrace(len={self._len}, spec={self.spec})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RoutingTrace):
            return NotImplemented
        return (
            self.spec == other.spec
            and np.array_equal(self.to_numpy(), other.to_numpy())
            and np.array_equal(self.versions, other.versions)
        )

    __hash__ = None  # mutable

    # ------------------------------------------------------------------ writing
    def _check_start(self, start: int) -> None:
        if isinstance(start, bool) or not isinstance(start, int | np.integer) or start < 0:
            raise ValueError(f"start: expected an int >= 0, got {start!r}")
        if start > self._len:
            raise ValueError(
                f"start: rows for positions {self._len}..{start - 1} would be missing (a gap); "
                f"expected start <= {self._len}, got {start}"
            )

    def _reserve(self, n: int) -> None:
        if n <= self._rows.shape[0]:
            return
        cap = max(n, 2 * self._rows.shape[0], 16)
        rows = np.zeros((cap, *self.spec.row_shape), dtype=self.spec.dtype)
        rows[: self._len] = self._rows[: self._len]
        versions = np.zeros(cap, dtype=np.int64)
        versions[: self._len] = self._versions[: self._len]
        self._rows, self._versions = rows, versions

    def _write(self, at: int, rows: np.ndarray, versions: np.ndarray) -> None:
        end = at + rows.shape[0]
        self._reserve(end)
        self._rows[at:end] = rows
        self._versions[at:end] = versions
        self._len = end

    def extend(self, rows: RowsLike, *, version: int | Sequence[int], start: int = 0) -> int:
        """Adds the rows of ONE forward pass over input positions `start .. start+n-1`.

        Only positions `>= len(self)` are appended; rows for positions the trace already has are ignored
        (append-only by position). `version` is one int for the whole call or one int per row (an engine
        that swapped weights mid-call). Returns how many rows were appended.
        """
        self._check_start(start)
        arr = coerce_rows(rows, self.spec)
        versions = coerce_versions(version, arr.shape[0])
        skip = self._len - start
        if skip >= arr.shape[0]:
            return 0
        self._write(self._len, arr[skip:], versions[skip:])
        return arr.shape[0] - skip

    def replace(self, rows: RowsLike, *, version: int | Sequence[int], start: int = 0) -> int:
        """The "latest call wins" strategy (verl#6029), kept for comparison with `extend`.

        Rows from `start` on are dropped and replaced by this call's rows, so a resumed call that re-prefills
        the whole context re-labels every earlier row with its own (newer) version. Returns the rows written.
        """
        self._check_start(start)
        arr = coerce_rows(rows, self.spec)
        versions = coerce_versions(version, arr.shape[0])
        self._len = start
        self._write(start, arr, versions)
        return arr.shape[0]

    # ------------------------------------------------------------------ reading
    @property
    def versions(self) -> np.ndarray:
        """One int64 weight version per row (a copy)."""
        return self._versions[: self._len].copy()

    def to_numpy(self) -> np.ndarray:
        """`[len, num_layers, top_k]` in `spec.dtype` (uint8 for <= 256 experts, else uint16); a copy."""
        return self._rows[: self._len].copy()

    def copy(self) -> RoutingTrace:
        out = RoutingTrace(self.spec)
        out._write(0, self._rows[: self._len], self._versions[: self._len])
        return out

    def missing(self, num_tokens: int) -> list[int]:
        """Positions among `0..num_tokens-2` without a row (a finished sequence must have none missing)."""
        if num_tokens < 0:
            raise ValueError(f"num_tokens: expected >= 0, got {num_tokens}")
        expected = max(num_tokens - 1, 0)
        if self._len > expected:
            raise ValueError(
                f"missing: a sequence of {num_tokens} tokens has at most {expected} rows, got a trace with {self._len}"
            )
        return list(range(self._len, expected))

    def replay(self, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows `[seq_len, num_layers, top_k]` and a bool mask `[seq_len]` of positions that have a row.

        Positions without a row are masked (False) and must route natively; their ids are zero filler and
        are never to be replayed as expert 0.
        """
        if seq_len < self._len:
            raise ValueError(
                f"replay: the trace has {self._len} rows, more than seq_len; expected seq_len >= {self._len}, "
                f"got {seq_len}"
            )
        rows = np.zeros((seq_len, *self.spec.row_shape), dtype=self.spec.dtype)
        rows[: self._len] = self._rows[: self._len]
        mask = np.zeros(seq_len, dtype=bool)
        mask[: self._len] = True
        return rows, mask

    # ------------------------------------------------------------------ wire formats
    def _header(self) -> dict[str, object]:
        s = self.spec
        header: dict[str, object] = {
            "num_layers": s.num_layers,
            "top_k": s.top_k,
            "num_experts": s.num_experts,
            "len": self._len,
            "dtype": s.dtype.name,
        }
        if s.layers is not None:
            header["layers"] = list(s.layers)
        return header

    def to_bytes(self) -> bytes:
        """`RTRC`, a format byte, a JSON header (length-prefixed), the rows, then the int64 versions (LE)."""
        header = json.dumps(self._header(), sort_keys=True).encode()
        rows = np.ascontiguousarray(self._rows[: self._len]).astype(self.spec.dtype.newbyteorder("<"))
        versions = self._versions[: self._len].astype("<i8")
        return b"".join(
            [
                _MAGIC,
                bytes([_FORMAT_VERSION]),
                struct.pack("<I", len(header)),
                header,
                rows.tobytes(),
                versions.tobytes(),
            ]
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> RoutingTrace:
        if data[:4] != _MAGIC or len(data) < 9:
            raise ValueError(f"from_bytes: expected data starting with {_MAGIC!r}, got {bytes(data[:4])!r}")
        if data[4] != _FORMAT_VERSION:
            raise ValueError(f"from_bytes: expected format version {_FORMAT_VERSION}, got {data[4]}")
        (hlen,) = struct.unpack("<I", data[5:9])
        header = json.loads(data[9 : 9 + hlen])
        layers = header.get("layers")
        spec = RoutingSpec(header["num_layers"], header["top_k"], header["num_experts"], _layers(layers))
        n = int(header["len"])
        dtype = np.dtype(header["dtype"]).newbyteorder("<")
        row_bytes = n * spec.num_layers * spec.top_k * dtype.itemsize
        body = data[9 + hlen :]
        if len(body) != row_bytes + 8 * n:
            raise ValueError(f"from_bytes: expected {row_bytes + 8 * n} payload bytes, got {len(body)}")
        rows = np.frombuffer(body[:row_bytes], dtype=dtype).reshape(n, *spec.row_shape)
        versions = np.frombuffer(body[row_bytes:], dtype="<i8")
        trace = cls(spec)
        trace.extend(rows, version=versions, start=0)
        return trace

    def to_json_dict(self) -> dict[str, object]:
        """`{"data": base64 rows, "shape": [...], "dtype": ..., "versions": [...], "num_experts": E}`, plus `"layers"`
        (the decoder layer of each column) when the spec states them."""
        rows = np.ascontiguousarray(self._rows[: self._len])
        out: dict[str, object] = {
            "data": base64.b64encode(rows.astype(self.spec.dtype.newbyteorder("<")).tobytes()).decode(),
            "shape": [self._len, *self.spec.row_shape],
            "dtype": self.spec.dtype.name,
            "versions": [int(v) for v in self._versions[: self._len]],
            "num_experts": self.spec.num_experts,
        }
        if self.spec.layers is not None:
            out["layers"] = list(self.spec.layers)
        return out

    @classmethod
    def from_json_dict(cls, d: dict[str, object]) -> RoutingTrace:
        shape = [int(s) for s in d["shape"]]  # type: ignore[union-attr]
        if len(shape) != 3:
            raise ValueError(f"from_json_dict: expected shape [rows, layers, top_k], got {shape}")
        spec = RoutingSpec(shape[1], shape[2], int(d["num_experts"]), _layers(d.get("layers")))  # type: ignore[arg-type]
        raw = base64.b64decode(d["data"])  # type: ignore[arg-type]
        trace = cls(spec)
        dtype = np.dtype(str(d["dtype"])).newbyteorder("<")
        trace.extend((raw, shape, dtype), version=list(d["versions"]), start=0)  # type: ignore[arg-type]
        return trace


def _layers(value: object) -> tuple[int, ...] | None:
    """A serialised `RoutingSpec.layers` (a list of ints, or absent)."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(i, int) for i in value):
        raise ValueError(f"routing layers: expected a list of decoder-layer indices, got {value!r:.80}")
    return tuple(value)
