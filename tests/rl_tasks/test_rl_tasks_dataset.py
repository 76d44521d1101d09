"""The dataset task: both file formats, a validation file or held-out rows, rewards, budget and alphabet."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rl_tasks.dataset_task import DatasetTaskConfig
from rl_tasks.exact_match import ExactMatchReward
from rl_tasks.gsm8k import Gsm8kReward


def _row(i: int, prompt: str | None = None, truth: str | None = None) -> dict[str, object]:
    return {
        "data_source": "mine",
        "prompt": [{"role": "user", "content": prompt if prompt is not None else f"{i}+{i}="}],
        "reward_model": {"style": "rule", "ground_truth": truth if truth is not None else str(2 * i)},
        "extra_info": {"index": i},
    }


def _jsonl(path: Path, rows: list[dict[str, object]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _parquet(path: Path, rows: list[dict[str, object]]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_parquet_train_and_jsonl_validation_files_are_read_as_given(tmp_path: Path) -> None:
    train = _parquet(tmp_path / "train.parquet", [_row(i) for i in range(5)])
    val = _jsonl(tmp_path / "val.jsonl", [_row(i) for i in range(7, 9)])
    task = DatasetTaskConfig(train_file=train, val_file=val).build()
    assert [e.prompt for e in task.splits.train] == [f"{i}+{i}=" for i in range(5)]
    assert [(e.uid, e.ground_truth) for e in task.splits.validation] == [("mine-7", "14"), ("mine-8", "16")]
    assert task.kind == "dataset" and task.tool is None
    used = {c for e in (*task.splits.train, *task.splits.validation) for c in e.prompt + e.ground_truth}
    assert task.alphabet == "".join(sorted(used)) == "+01234678="
    assert task.max_answer_chars == 2  # the longest ground truth, "14" and "16"
    assert [p.text for p in task.demonstration(task.splits.train[3])] == ["6"]


def test_held_out_rows_are_seeded_disjoint_and_keep_file_order(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "all.jsonl", [_row(i) for i in range(40)])
    a = DatasetTaskConfig(train_file=path, val_size=8, seed=1).build()
    assert a.splits == DatasetTaskConfig(train_file=path, val_size=8, seed=1).build().splits
    b = DatasetTaskConfig(train_file=path, val_size=8, seed=2).build()
    assert [e.uid for e in a.splits.validation] != [e.uid for e in b.splits.validation]
    for task in (a, b):
        val, train = task.splits.validation, task.splits.train
        assert len(val) == 8 and len(train) == 32
        assert not {e.prompt for e in val} & {e.prompt for e in train}
        order = [int(e.uid.removeprefix("mine-")) for e in val]
        assert order == sorted(order)


def test_train_rows_repeating_a_held_out_prompt_are_dropped(tmp_path: Path) -> None:
    rows = [_row(i, prompt="same") if i % 2 else _row(i) for i in range(20)]
    task = DatasetTaskConfig(train_file=_jsonl(tmp_path / "dup.jsonl", rows), val_size=5, seed=0).build()
    held = [e.prompt for e in task.splits.validation]
    assert "same" in held  # this seed holds out at least one of the 10 repeated rows
    assert not set(held) & {e.prompt for e in task.splits.train}
    assert len(task.splits.train) == 15 - (10 - held.count("same"))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"data_source": "d", "reward_model": {"ground_truth": "1"}}, "line 2: prompt: expected the field, got none"),
        ({"data_source": "d", "prompt": "p"}, "line 2: reward_model.ground_truth: expected it"),
        (
            {"data_source": "d", "prompt": "p", "ground_truth": None},
            "line 2: reward_model.ground_truth: expected it (or a top-level ground_truth), got null ground_truth",
        ),
    ],
)
def test_bad_rows_are_refused_with_key_file_line_and_expectation(
    tmp_path: Path, row: dict[str, object], message: str
) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", [_row(0), row])
    with pytest.raises(ValueError, match=re.escape(f"task.train_file: {path} {message}")):
        DatasetTaskConfig(train_file=path, val_size=1).build()


def test_held_out_rows_need_more_rows_than_val_size_and_a_file_needs_rows(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [_row(i) for i in range(4)])
    with pytest.raises(ValueError, match=re.escape(f"task.val_size: expected fewer than the 4 rows of {path}, got 4")):
        DatasetTaskConfig(train_file=path, val_size=4).build()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=re.escape(f"task.train_file: {empty}: expected at least one row, got only")):
        DatasetTaskConfig(train_file=str(empty), val_file=path).build()
    with pytest.raises(ValueError, match=re.escape("task.reward: expected one of ('exact', 'gsm8k'), got 'fuzzy'")):
        DatasetTaskConfig(train_file=path, val_size=1, reward="fuzzy")  # type: ignore[arg-type]


def test_rows_without_a_source_need_the_default_data_source(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "plain.jsonl", [{"prompt": f"q{i}", "ground_truth": i} for i in range(3)])
    with pytest.raises(ValueError, match=re.escape("line 1: data_source: expected a non-empty str (or a default_data")):
        DatasetTaskConfig(train_file=path, val_size=1).build()
    task = DatasetTaskConfig(train_file=path, val_size=1, default_data_source="plain").build()
    assert {e.data_source for e in task.splits.train} == {"plain"}


def test_reward_choice_and_budget_override(tmp_path: Path) -> None:
    rows = [_row(i, prompt=f"How much is {i} twice?", truth=f"Twice is {2 * i}.\n#### {2 * i}") for i in range(6)]
    path = _jsonl(tmp_path / "gsm.jsonl", rows)
    exact = DatasetTaskConfig(train_file=path, val_size=2).build()
    gsm = DatasetTaskConfig(train_file=path, val_size=2, reward="gsm8k", max_answer_chars=64).build()
    assert isinstance(exact.reward_fn, ExactMatchReward) and isinstance(gsm.reward_fn, Gsm8kReward)
    ex = gsm.splits.validation[0]
    assert gsm.reward_fn(f"so #### {ex.ground_truth.split()[-1]}", ex).acc == 1.0
    assert exact.reward_fn(f"so #### {ex.ground_truth.split()[-1]}", ex).acc == 0.0
    assert exact.max_answer_chars == max(len(r["reward_model"]["ground_truth"]) for r in rows)  # type: ignore[index]
    assert gsm.max_answer_chars == 64
    assert set("#?.\nHTw") <= set(exact.alphabet)


def test_fingerprint_follows_the_file_contents_not_the_path(tmp_path: Path) -> None:
    rows = [_row(i) for i in range(6)]
    first = DatasetTaskConfig(train_file=_jsonl(tmp_path / "a.jsonl", rows), val_size=2).build()
    moved = DatasetTaskConfig(train_file=_jsonl(tmp_path / "b.jsonl", rows), val_size=2).build()
    edited = DatasetTaskConfig(train_file=_jsonl(tmp_path / "c.jsonl", [*rows, _row(9)]), val_size=2).build()
    reseeded = DatasetTaskConfig(train_file=str(tmp_path / "a.jsonl"), val_size=2, seed=1).build()
    assert first.fingerprint() == moved.fingerprint()
    assert len({first.fingerprint(), edited.fingerprint(), reseeded.fingerprint()}) == 3
