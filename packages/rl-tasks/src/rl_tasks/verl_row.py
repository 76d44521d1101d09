"""One verl-style dataset row as a TaskExample, every refusal naming the file, the 1-based line or row and the field.

Fields: `prompt` (a non-blank string, or a non-empty chat list of `{"role", "content"}` with non-blank contents),
`reward_model.ground_truth` (or a top-level `ground_truth`: a non-blank string or a finite number; a null one
counts as absent), `data_source` (a non-empty string; absent or null: the loader's default). Optional: `uid`,
else `extra_info.index` (uid `"<data_source>-<index>"`), else `"<file stem>-<index>"` with the 0-based index of
the row among the file's rows (blank JSONL lines skipped).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rl_tasks.example import CHAT_ROLES, ChatMessage, TaskExample


@dataclass(frozen=True)
class RowLocation:
    """Where a row is: `number` counts from 1 (a JSONL `line`, blank lines included, or a parquet `row`);
    `index` counts the file's rows from 0 (blank lines skipped) and names rows without a uid."""

    path: Path
    unit: Literal["line", "row"]
    number: int
    index: int

    def __str__(self) -> str:
        return f"{self.path} {self.unit} {self.number}"


def _blank(value: object) -> bool:
    return isinstance(value, str) and not value.strip()


def _parse_message(value: object, field: str, where: RowLocation) -> ChatMessage:
    if not isinstance(value, Mapping) or "role" not in value or "content" not in value:
        raise ValueError(f"{where}: {field}: expected a {{'role', 'content'}} mapping, got {value!r:.80}")
    role, content = value["role"], value["content"]
    if role not in CHAT_ROLES:
        raise ValueError(f"{where}: {field}.role: expected one of {CHAT_ROLES}, got {role!r:.80}")
    if not isinstance(content, str) or _blank(content):
        raise ValueError(f"{where}: {field}.content: expected a non-blank str, got {content!r:.80}")
    return ChatMessage(role=role, content=content)


def _parse_prompt(value: object, where: RowLocation) -> tuple[str, tuple[ChatMessage, ...]]:
    if isinstance(value, str) and not _blank(value):
        return value, ()
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: prompt: expected a non-blank str or a non-empty chat list, got {value!r:.80}")
    messages = tuple(_parse_message(msg, f"prompt[{k}]", where) for k, msg in enumerate(value))
    return "\n\n".join(m.content for m in messages), messages


def _ground_truth_field(row: Mapping[str, object], where: RowLocation) -> tuple[str, object]:
    """The (field name, value) the ground truth comes from: `reward_model.ground_truth` first, then the top-level
    `ground_truth`; a null value counts as absent (parquet fills a column a row lacks with null)."""
    reward_model = row.get("reward_model")
    nested = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
    if nested is not None:
        return "reward_model.ground_truth", nested
    if row.get("ground_truth") is not None:
        return "ground_truth", row["ground_truth"]
    given = [k for k in ("reward_model.ground_truth", "ground_truth") if _has(row, k)]
    got = f"null {' and '.join(given)}" if given else f"neither (keys: {sorted(row)})"
    raise ValueError(f"{where}: reward_model.ground_truth: expected it (or a top-level ground_truth), got {got}")


def _has(row: Mapping[str, object], dotted: str) -> bool:
    head, _, tail = dotted.partition(".")
    if not tail:
        return head in row
    inner = row.get(head)
    return isinstance(inner, Mapping) and tail in inner


def _parse_ground_truth(row: Mapping[str, object], where: RowLocation) -> str:
    field, value = _ground_truth_field(row, where)
    if isinstance(value, str) and not _blank(value):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(value)
    raise ValueError(f"{where}: {field}: expected a non-blank str or a finite number, got {value!r:.80}")


def _parse_data_source(row: Mapping[str, object], default: str | None, where: RowLocation) -> str:
    value = row.get("data_source")
    if value is None:
        if default is None:
            raise ValueError(f"{where}: data_source: expected a non-empty str (or a default_data_source), got none")
        return default
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: data_source: expected a non-empty str, got {value!r:.80}")
    return value


def _parse_uid(row: Mapping[str, object], data_source: str, where: RowLocation) -> str:
    uid = row.get("uid")
    if uid is not None:
        if isinstance(uid, bool) or not isinstance(uid, str | int) or uid == "":
            raise ValueError(f"{where}: uid: expected a non-empty str or an int, got {uid!r:.80}")
        return str(uid)
    extra = row.get("extra_info")
    if isinstance(extra, Mapping) and extra.get("index") is not None:
        return f"{data_source}-{extra['index']}"
    return f"{where.path.stem}-{where.index}"


def parse_row(row: object, where: RowLocation, default_data_source: str | None) -> TaskExample:
    """One verl-style row as a TaskExample (fields: see the module doc); ValueError naming `where` and the field."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected an object (mapping), got {type(row).__name__}")
    if "prompt" not in row:
        raise ValueError(f"{where}: prompt: expected the field, got none (keys: {sorted(row)})")
    prompt, messages = _parse_prompt(row["prompt"], where)
    data_source = _parse_data_source(row, default_data_source, where)
    uid = _parse_uid(row, data_source, where)
    return TaskExample(uid, data_source, prompt, _parse_ground_truth(row, where), messages)
