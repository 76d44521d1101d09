"""Loaders for verl-style datasets (parquet or JSONL), one TaskExample per row.

Row fields: `prompt` (a string, or a chat list of `{"role", "content"}`), `reward_model.ground_truth` (or a
top-level `ground_truth`), `data_source` (or the loader's `default_data_source`). Optional: `uid`, else
`extra_info.index` (uid `"<data_source>-<index>"`), else `"<file stem>-<row number>"`. A missing or
malformed field raises ValueError naming the file, the row and what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from rl_tasks.example import ChatMessage, TaskExample


def _where(path: Path, row: int) -> str:
    return f"{path.name} row {row}"


def _parse_prompt(value: object, where: str) -> tuple[str, tuple[ChatMessage, ...]]:
    if isinstance(value, str):
        return value, ()
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: 'prompt' expected a str or a non-empty chat list, got {value!r:.80}")
    messages = []
    for k, msg in enumerate(value):
        if not isinstance(msg, Mapping) or "role" not in msg or "content" not in msg:
            raise ValueError(f"{where}: prompt[{k}] expected a {{'role', 'content'}} mapping, got {msg!r:.80}")
        messages.append(ChatMessage(role=str(msg["role"]), content=msg["content"]))
    return "\n\n".join(m.content for m in messages), tuple(messages)


def _parse_ground_truth(row: Mapping[str, object], where: str) -> str:
    reward_model = row.get("reward_model")
    if isinstance(reward_model, Mapping) and "ground_truth" in reward_model:
        value = reward_model["ground_truth"]
    elif "ground_truth" in row:
        value = row["ground_truth"]
    else:
        raise ValueError(f"{where}: missing 'reward_model.ground_truth' (or 'ground_truth'), got keys {sorted(row)}")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{where}: ground_truth expected a str or number, got {type(value).__name__}")
    return str(value)


def _parse_uid(row: Mapping[str, object], data_source: str, stem: str, index: int) -> str:
    if row.get("uid") is not None:
        return str(row["uid"])
    extra = row.get("extra_info")
    if isinstance(extra, Mapping) and extra.get("index") is not None:
        return f"{data_source}-{extra['index']}"
    return f"{stem}-{index}"


def parse_row(row: object, path: Path, index: int, default_data_source: str | None) -> TaskExample:
    """One verl-style row as a TaskExample (see module doc for the fields)."""
    where = _where(path, index)
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if "prompt" not in row:
        raise ValueError(f"{where}: missing field 'prompt', got keys {sorted(row)}")
    prompt, messages = _parse_prompt(row["prompt"], where)
    data_source = row.get("data_source") or default_data_source
    if not isinstance(data_source, str) or not data_source:
        raise ValueError(f"{where}: missing field 'data_source' and no default_data_source given")
    uid = _parse_uid(row, data_source, path.stem, index)
    return TaskExample(uid, data_source, prompt, _parse_ground_truth(row, where), messages)


def _check_unique(examples: list[TaskExample], path: Path) -> list[TaskExample]:
    seen: dict[str, int] = {}
    for i, ex in enumerate(examples):
        if ex.uid in seen:
            raise ValueError(f"{path.name}: uid {ex.uid!r} appears in rows {seen[ex.uid]} and {i}; expected unique")
        seen[ex.uid] = i
    return examples


def _parse_rows(rows: Iterable[object], path: Path, default_data_source: str | None) -> list[TaskExample]:
    examples = [parse_row(row, path, i, default_data_source) for i, row in enumerate(rows)]
    return _check_unique(examples, path)


def load_jsonl(path: str | Path, *, default_data_source: str | None = None) -> list[TaskExample]:
    """One JSON object per non-blank line."""
    path = Path(path)
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path.name} line {lineno}: invalid JSON ({exc.msg})") from exc
    return _parse_rows(rows, path, default_data_source)


def load_parquet(path: str | Path, *, default_data_source: str | None = None) -> list[TaskExample]:
    """All rows of a parquet file (read with pyarrow)."""
    import pyarrow.parquet as pq

    path = Path(path)
    return _parse_rows(pq.read_table(path).to_pylist(), path, default_data_source)


def load_dataset_file(path: str | Path, *, default_data_source: str | None = None) -> list[TaskExample]:
    """Dispatches on the suffix: `.parquet`, `.jsonl` or `.json` (JSON lines)."""
    path = Path(path)
    if path.suffix == ".parquet":
        return load_parquet(path, default_data_source=default_data_source)
    if path.suffix in (".jsonl", ".json"):
        return load_jsonl(path, default_data_source=default_data_source)
    raise ValueError(f"load_dataset_file: expected a .parquet, .jsonl or .json file, got {path.name!r}")
