"""StepRows: one metrics line per step, in step order, each with its validation when one was started for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from async_pipeline.step_rows import StepRows
from run_lifecycle import MetricsLog, read_metrics


def test_a_step_waits_for_its_validation_and_later_steps_wait_for_it(tmp_path: Path) -> None:
    rows = StepRows(MetricsLog(tmp_path / "m.jsonl"), next_step=0)
    rows.expect_validation(0)
    rows.add_training(1, {"loss": 1.0})
    rows.expect_validation(2)
    rows.add_training(2, {"loss": 2.0})
    rows.add_training(3, {"loss": 3.0})
    assert read_metrics(tmp_path / "m.jsonl") == [] and rows.unwritten == [0, 1, 2, 3]
    rows.add_validation(0, {"val": 0.5})
    assert [r["step"] for r in read_metrics(tmp_path / "m.jsonl")] == [0, 1]
    rows.add_validation(2, {"val": 0.7})
    assert read_metrics(tmp_path / "m.jsonl") == [
        {"step": 0, "val": 0.5},
        {"step": 1, "loss": 1.0},
        {"step": 2, "loss": 2.0, "val": 0.7},
        {"step": 3, "loss": 3.0},
    ]
    assert rows.next_step == 4 and rows.unwritten == []


def test_a_validation_nobody_started_or_a_step_written_twice_is_an_error(tmp_path: Path) -> None:
    rows = StepRows(MetricsLog(tmp_path / "m.jsonl"), next_step=5)
    with pytest.raises(ValueError, match="expected one of"):
        rows.add_validation(5, {"val": 1.0})
    rows.add_training(5, {"loss": 1.0})
    with pytest.raises(ValueError, match="written already"):
        rows.add_training(5, {"loss": 1.0})
