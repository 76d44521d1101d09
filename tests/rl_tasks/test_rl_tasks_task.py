"""The Task interface: its invariants, its checked demonstrations, a stable fingerprint, and built tasks that
travel (pickle) to other processes."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rl_tasks.calculator_task import CalculatorTaskConfig
from rl_tasks.dataset_task import DatasetTaskConfig
from rl_tasks.exact_match import ExactMatchReward
from rl_tasks.example import TaskExample
from rl_tasks.task import Piece, Task, TaskSplits, answer_demonstration
from rl_tasks.toy_task import ToyTaskConfig

EX = TaskExample("u", "d", "1+1=", "2")


def _task(**overrides: object) -> Task:
    fields: dict[str, object] = {
        "kind": "test",
        "splits": TaskSplits(train=(EX,), validation=(TaskExample("v", "d", "2+2=", "4"),)),
        "reward_fn": ExactMatchReward(),
        "alphabet": "+0123456789=",
        "max_answer_chars": 2,
        "tool": None,
        "demonstrate": answer_demonstration,
        "identity": {"x": 1},
    }
    return Task(**{**fields, **overrides})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"splits": TaskSplits(train=(EX,), validation=())}, "expected non-empty splits, got 1 train and 0"),
        ({"alphabet": "10+="}, "expected a sorted alphabet without duplicates, got '10\\+='"),
        ({"alphabet": "+0123="}, "characters \\['4'\\] of the data are outside the alphabet"),
        ({"max_answer_chars": 0}, "expected max_answer_chars >= 1 and response_tokens >= 0, got 0, 0"),
    ],
)
def test_task_refuses_broken_invariants(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _task(**overrides)


def test_demonstrations_are_checked_before_training_on_them() -> None:
    assert _task().demonstration(EX) == (Piece("2", True),)
    with pytest.raises(ValueError, match="expected the last piece to be a model turn"):
        _task(demonstrate=lambda ex: (Piece("2", True), Piece("=3;", False))).demonstration(EX)
    with pytest.raises(ValueError, match="expected a non-empty tuple of Piece, got \\(\\)"):
        _task(demonstrate=lambda ex: ()).demonstration(EX)
    with pytest.raises(ValueError, match=re.escape("Piece.text: expected a non-empty str, got ''")):
        Piece("", True)


def test_fingerprint_is_stable_across_processes_and_follows_kind_and_identity() -> None:
    code = "from rl_tasks import ToyTaskConfig; print(ToyTaskConfig(train_size=50, val_size=5).build().fingerprint())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    toy = ToyTaskConfig(train_size=50, val_size=5).build()
    assert out.stdout.strip() == toy.fingerprint()
    assert _task().fingerprint() != _task(identity={"x": 2}).fingerprint()
    assert _task().fingerprint() != _task(kind="other").fingerprint()
    assert toy.fingerprint() != ToyTaskConfig(train_size=50, val_size=5, seed=1).build().fingerprint()


def test_built_tasks_pickle_with_splits_reward_and_tool_intact(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"data_source": "d", "prompt": f"q{i}", "ground_truth": i}) + "\n" for i in range(5))
    )
    for cfg in (
        ToyTaskConfig(train_size=50, val_size=5),
        CalculatorTaskConfig(train_size=50, val_size=5),
        DatasetTaskConfig(train_file=str(data), val_size=2),
    ):
        task = cfg.build()
        back = pickle.loads(pickle.dumps(task))
        assert back.splits == task.splits and back.fingerprint() == task.fingerprint()
        assert back.tool == task.tool and back.reward_fn == task.reward_fn
        ex = task.splits.validation[0]
        assert back.demonstration(ex) == task.demonstration(ex)
        assert dataclasses.asdict(cfg)["kind"] == task.kind
