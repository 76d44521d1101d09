"""Loaders for verl-style dataset files (parquet, or JSON lines as `.jsonl` / `.json`), one TaskExample per row.

The row fields are those of `rl_tasks.verl_row`. Every refusal is a ValueError naming the file, and for a row's
fault its 1-based JSONL line (blank lines counted) or parquet row and the field, as expected/got: a missing path,
an unsupported suffix, a file with no row (empty, or only blank lines), bytes that are not UTF-8 (with the byte
offset in the file), invalid JSON, a malformed row, and a uid that repeats.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rl_tasks.example import TaskExample
from rl_tasks.verl_row import RowLocation, parse_row

DATASET_SUFFIXES = (".parquet", ".jsonl", ".json")


def _existing_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        got = "a directory" if path.is_dir() else "no such file"
        raise ValueError(f"{path}: expected an existing file, got {got}")
    return path


def check_dataset_path(path: str | Path) -> Path:
    """`path` as a Path when it names an existing file with a suffix in `DATASET_SUFFIXES`; reads no data."""
    path = Path(path)
    if path.suffix not in DATASET_SUFFIXES:
        raise ValueError(f"{path}: expected a .parquet, .jsonl or .json file, got {path.name!r}")
    return _existing_file(path)


def _check_unique(examples: list[tuple[RowLocation, TaskExample]]) -> list[TaskExample]:
    seen: dict[str, RowLocation] = {}
    for where, ex in examples:
        first = seen.setdefault(ex.uid, where)
        if first is not where:
            raise ValueError(
                f"{where}: uid: expected a uid unique in the file, got {ex.uid!r}, as on {first.unit} {first.number}"
            )
    return [ex for _, ex in examples]


def _parse_rows(
    rows: Iterable[tuple[RowLocation, object]], path: Path, default_data_source: str | None, empty: str
) -> list[TaskExample]:
    """The rows as examples; `empty` says what the file held when it has no row."""
    examples = [(where, parse_row(row, where, default_data_source)) for where, row in rows]
    if not examples:
        raise ValueError(f"{path}: expected at least one row, got {empty}")
    return _check_unique(examples)


def _jsonl_rows(path: Path) -> tuple[list[tuple[RowLocation, object]], int]:
    """The (location, decoded JSON value) of every non-blank line, and the number of lines."""
    rows: list[tuple[RowLocation, object]] = []
    offset, lineno = 0, 0
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = RowLocation(path, "line", lineno, len(rows))
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"{where} (byte offset {offset + exc.start} in the file): expected UTF-8 text, got byte "
                    f"0x{raw[exc.start]:02x} ({exc.reason})"
                ) from exc
            offset += len(raw)
            if not line.strip():
                continue
            try:
                rows.append((where, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{where}: expected a JSON object, got invalid JSON ({exc.msg} at column {exc.colno})"
                ) from exc
    return rows, lineno


def load_jsonl(path: str | Path, *, default_data_source: str | None = None) -> list[TaskExample]:
    """One JSON object per non-blank line (UTF-8), whatever the suffix."""
    path = _existing_file(path)
    rows, lines = _jsonl_rows(path)
    empty = "an empty file" if lines == 0 else f"only blank lines ({lines})"
    return _parse_rows(rows, path, default_data_source, empty)


def load_parquet(path: str | Path, *, default_data_source: str | None = None) -> list[TaskExample]:
    """All rows of a parquet file (read with pyarrow), whatever the suffix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = _existing_file(path)
    try:
        table = pq.read_table(path)
    except pa.ArrowException as exc:
        raise ValueError(f"{path}: expected a parquet file, got one pyarrow cannot read ({exc})") from exc
    rows = ((RowLocation(path, "row", i + 1, i), row) for i, row in enumerate(table.to_pylist()))
    return _parse_rows(rows, path, default_data_source, "a table of 0 rows")


def load_dataset_file(path: str | Path, *, default_data_source: str | None = None) -> list[TaskExample]:
    """Dispatches on the suffix: `.parquet`, or `.jsonl` / `.json` (JSON lines)."""
    path = check_dataset_path(path)
    if path.suffix == ".parquet":
        return load_parquet(path, default_data_source=default_data_source)
    return load_jsonl(path, default_data_source=default_data_source)
