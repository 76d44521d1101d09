"""verl-style parquet/JSONL loaders on small files written by the tests."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rl_tasks.example import ChatMessage
from rl_tasks.loaders import load_dataset_file, load_jsonl, load_parquet

ROWS = [
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}],
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"index": 0, "split": "train"},
    },
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "2+2?"}],
        "reward_model": {"style": "rule", "ground_truth": "4"},
        "extra_info": {"index": 1, "split": "train"},
    },
]


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_parquet_with_chat_prompts_and_nested_ground_truth(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    examples = load_parquet(path)
    assert [e.uid for e in examples] == ["openai/gsm8k-0", "openai/gsm8k-1"]
    first = examples[0]
    assert first.messages == (ChatMessage("system", "Be brief."), ChatMessage("user", "1+1?"))
    assert first.prompt == "Be brief.\n\n1+1?" and first.ground_truth == "2"
    assert load_dataset_file(path) == examples


def test_jsonl_with_string_prompt_top_level_ground_truth_and_default_source(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "mine.jsonl", [{"prompt": "3+4=", "ground_truth": 7}, {"prompt": "x", "ground_truth": "y"}]
    )
    examples = load_jsonl(path, default_data_source="custom")
    assert [(e.uid, e.data_source, e.prompt, e.ground_truth, e.messages) for e in examples] == [
        ("mine-0", "custom", "3+4=", "7", ()),
        ("mine-1", "custom", "x", "y", ()),
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"data_source": "d", "reward_model": {"ground_truth": "1"}}, "line 1: prompt: expected the field, got none"),
        ({"data_source": "d", "prompt": "p"}, "line 1: reward_model.ground_truth: expected it"),
        ({"prompt": "p", "ground_truth": "1"}, "line 1: data_source: expected a non-empty str"),
        (
            {"data_source": 5, "prompt": "p", "ground_truth": "1"},
            "line 1: data_source: expected a non-empty str, got 5",
        ),
        (
            {"data_source": "d", "prompt": [{"content": "hi"}], "ground_truth": "1"},
            "line 1: prompt[0]: expected a {'role', 'content'} mapping",
        ),
        (
            {"data_source": "d", "prompt": [], "ground_truth": "1"},
            "line 1: prompt: expected a non-blank str or a non-empty chat list, got []",
        ),
        (
            {"data_source": "d", "prompt": "p", "ground_truth": [1, 2]},
            "line 1: ground_truth: expected a non-blank str or a finite number, got [1, 2]",
        ),
        (
            {"data_source": "d", "prompt": [{"role": "robot", "content": "x"}], "ground_truth": "1"},
            "line 1: prompt[0].role: expected one of ('system', 'user', 'assistant', 'tool'), got 'robot'",
        ),
        (
            {"uid": "", "data_source": "d", "prompt": "p", "ground_truth": "1"},
            "line 1: uid: expected a non-empty str or an int, got ''",
        ),
    ],
)
def test_malformed_rows_raise_with_file_line_and_field(tmp_path: Path, row: dict[str, object], message: str) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises(ValueError, match=re.escape(f"{path} {message}")):
        load_jsonl(path)


def test_duplicate_uids_and_invalid_json_are_reported_by_line(tmp_path: Path) -> None:
    dup = _write_jsonl(
        tmp_path / "dup.jsonl", [{"uid": "a", "data_source": "d", "prompt": "p", "ground_truth": "1"}] * 2
    )
    repeated = "dup.jsonl line 2: uid: expected a uid unique in the file, got 'a', as on line 1"
    with pytest.raises(ValueError, match=re.escape(repeated)):
        load_jsonl(dup)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "p"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape("broken.jsonl line 2: expected a JSON object, got invalid JSON")):
        load_jsonl(broken)


def test_unknown_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape("expected a .parquet, .jsonl or .json file, got 'data.csv'")):
        load_dataset_file(tmp_path / "data.csv")
