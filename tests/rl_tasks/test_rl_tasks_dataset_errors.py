"""Bad dataset files are refused with a ValueError naming the file, the 1-based line (JSONL) or row (parquet) and the
field; a bad setting of the dataset task fails when its config is constructed, naming the key."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rl_tasks.dataset_task import DatasetTaskConfig
from rl_tasks.loaders import load_dataset_file, load_jsonl, load_parquet


def _row(i: int, **fields: object) -> dict[str, object]:
    return {"data_source": "d", "prompt": f"q{i}", "reward_model": {"ground_truth": str(i)}, **fields}


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "got"), [("", "an empty file"), ("\n  \n\t\n", "only blank lines (3)")])
def test_a_jsonl_file_without_rows_is_refused_naming_it(tmp_path: Path, text: str, got: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{path}: expected at least one row, got {got}")):
        load_jsonl(path)


def test_a_parquet_file_without_rows_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.Table.from_pylist([_row(0)]).slice(0, 0), path)
    with pytest.raises(ValueError, match=re.escape(f"{path}: expected at least one row, got a table of 0 rows")):
        load_parquet(path)


def test_bad_utf8_names_the_file_the_line_and_the_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    good = (json.dumps(_row(0)) + "\n").encode()
    path.write_bytes(good + b"\n" + '{"prompt": "caf\xe9"}\n'.encode("latin-1"))
    offset = len(good) + 1 + len('{"prompt": "caf')
    message = f"{path} line 3 (byte offset {offset} in the file): expected UTF-8 text, got byte 0xe9"
    with pytest.raises(ValueError, match=re.escape(message)):
        load_jsonl(path)


def test_a_missing_path_is_a_value_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ValueError, match=re.escape(f"{missing}: expected an existing file, got no such file")):
        load_dataset_file(missing)
    folder = tmp_path / "folder.parquet"
    folder.mkdir()
    with pytest.raises(ValueError, match=re.escape(f"{folder}: expected an existing file, got a directory")):
        load_parquet(folder)


@pytest.mark.parametrize(
    ("prompt", "field", "got"),
    [
        ("", "prompt", "''"),
        (" \n\t", "prompt", "' \\n\\t'"),
        (None, "prompt", "None"),
        ([], "prompt", "[]"),
        ([{"role": "user", "content": ""}], "prompt[0].content", "''"),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  "}], "prompt[1].content", "'  '"),
    ],
)
def test_an_empty_prompt_is_refused(tmp_path: Path, prompt: object, field: str, got: str) -> None:
    path = _jsonl(tmp_path / "p.jsonl", [_row(0), _row(1, prompt=prompt)])
    with pytest.raises(ValueError, match=re.escape(f"{path} line 2: {field}: expected a non-blank str")) as info:
        load_jsonl(path)
    assert str(info.value).endswith(f"got {got}")


@pytest.mark.parametrize(
    ("literal", "got"), [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf"), ("null", "null"), ('""', "''")]
)
def test_a_nan_infinite_null_or_blank_ground_truth_is_refused(tmp_path: Path, literal: str, got: str) -> None:
    path = tmp_path / "gt.jsonl"
    path.write_text(json.dumps(_row(0)) + "\n" + f'{{"data_source": "d", "prompt": "q", "ground_truth": {literal}}}\n')
    if literal == "null":  # a null ground truth counts as absent
        message = "reward_model.ground_truth: expected it (or a top-level ground_truth), got null ground_truth"
    else:
        message = f"ground_truth: expected a non-blank str or a finite number, got {got}"
    with pytest.raises(ValueError, match=re.escape(f"{path} line 2: {message}")):
        load_jsonl(path)


def test_parquet_errors_name_the_one_based_row_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    rows = [_row(0, reward_model={"ground_truth": 1.0}), _row(1, reward_model={"ground_truth": math.nan})]
    pq.write_table(pa.Table.from_pylist(rows), path)
    message = f"{path} row 2: reward_model.ground_truth: expected a non-blank str or a finite number, got nan"
    with pytest.raises(ValueError, match=re.escape(message)):
        load_parquet(path)


def test_jsonl_errors_count_lines_from_one_blank_lines_included(tmp_path: Path) -> None:
    path = tmp_path / "gaps.jsonl"
    path.write_text(f"\n{json.dumps(_row(0))}\n\n{json.dumps({'prompt': 'q', 'ground_truth': '1'})}\n")
    with pytest.raises(ValueError, match=re.escape(f"{path} line 4: data_source: expected a non-empty str")):
        load_jsonl(path)
    assert [e.uid for e in load_jsonl(path, default_data_source="x")] == ["gaps-0", "gaps-1"]  # uids count rows


def test_a_parquet_file_pyarrow_cannot_read_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "fake.parquet"
    path.write_text("not parquet")
    with pytest.raises(ValueError, match=re.escape(f"{path}: expected a parquet file, got one pyarrow cannot read")):
        load_parquet(path)


@pytest.mark.parametrize(
    ("train", "val", "message"),
    [
        ("nope.jsonl", "", "task.train_file: {tmp}/nope.jsonl: expected an existing file, got no such file"),
        ("data.csv", "", "task.train_file: {tmp}/data.csv: expected a .parquet, .jsonl or .json file, got 'data.csv'"),
        ("ok.jsonl", "gone.parquet", "task.val_file: {tmp}/gone.parquet: expected an existing file, got no such file"),
    ],
)
def test_a_bad_file_setting_fails_when_the_config_is_constructed(
    tmp_path: Path, train: str, val: str, message: str
) -> None:
    _jsonl(tmp_path / "ok.jsonl", [_row(i) for i in range(4)])
    (tmp_path / "data.csv").write_text("prompt,ground_truth\n")
    split = {"val_file": str(tmp_path / val)} if val else {"val_size": 1}
    with pytest.raises(ValueError, match=re.escape(message.format(tmp=tmp_path))):
        DatasetTaskConfig(train_file=str(tmp_path / train), **split)  # type: ignore[arg-type]


def test_settings_without_one_validation_source_or_train_file_fail_when_constructed(tmp_path: Path) -> None:
    path = str(_jsonl(tmp_path / "d.jsonl", [_row(i) for i in range(4)]))
    unset = "task.train_file: expected a .parquet, .jsonl or .json path, got ''"
    with pytest.raises(ValueError, match=re.escape(unset)):
        DatasetTaskConfig(val_size=1)
    exactly_one = "task: expected exactly one of val_file or val_size > 0, got "
    with pytest.raises(ValueError, match=re.escape(exactly_one + "val_file='', val_size=0")):
        DatasetTaskConfig(train_file=path)
    with pytest.raises(ValueError, match=re.escape(exactly_one + f"val_file={path!r}, val_size=2")):
        DatasetTaskConfig(train_file=path, val_file=path, val_size=2)


def test_read_and_row_errors_surface_in_build_naming_the_key(tmp_path: Path) -> None:
    train = _jsonl(tmp_path / "train.jsonl", [_row(i) for i in range(4)])
    val = _jsonl(tmp_path / "val.jsonl", [_row(0), _row(1, prompt="")])
    cfg = DatasetTaskConfig(train_file=str(train), val_file=str(val))
    with pytest.raises(ValueError, match=re.escape(f"task.val_file: {val} line 2: prompt: expected a non-blank str")):
        cfg.build()
    val.unlink()  # a file removed after the command line was parsed
    with pytest.raises(ValueError, match=re.escape(f"task.val_file: {val}: expected an existing file, got no such")):
        cfg.build()
