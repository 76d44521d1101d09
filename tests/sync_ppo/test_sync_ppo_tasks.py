"""Every task kind trains two steps of the app: a verl-style dataset file (JSONL with exact match, parquet with the
GSM8K checker), the scratchpad task (long traces, the reward on the final answer only) and the multi-turn
calculator task, whose tool observations are appended unsampled (version NOT_SAMPLED, so out of the loss) and whose
routing rows cover every position across turns."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from rollout_core import NOT_SAMPLED, TrajectoryStatus
from run_lifecycle import read_metrics
from trainers.dumps import read_dump
from trainers.recipe.config import SortTaskConfig
from trainers.sync_ppo.config import SyncConfig
from trainers.sync_ppo.trainer import train

pytestmark = pytest.mark.slow


def _verl_rows(n: int) -> list[dict[str, object]]:
    examples = SortTaskConfig(train_size=n, val_size=4).build().splits.train
    return [
        {
            "prompt": ex.prompt,
            "reward_model": {"ground_truth": ex.ground_truth},
            "data_source": "sortfile",
            "extra_info": {"index": i},
        }
        for i, ex in enumerate(examples)
    ]


def _steps(run: Path) -> list[dict[str, object]]:
    return [r for r in read_metrics(run / "metrics.jsonl") if r["step"] > 0]


def test_a_jsonl_dataset_with_exact_match_trains_two_steps(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    data = tmp_path / "sort.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _verl_rows(200)))
    cfg = tiny_config(tmp_path / "run", "--run.steps", "2", "--run.plots", "false", "--task", "dataset",
                      "--task.train_file", str(data), "--task.val_size", "8")  # fmt: skip
    train(cfg)
    rows = _steps(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2] and all(r["rollout/num_samples"] == 12.0 for r in rows)
    assert "val-core/sortfile/acc/mean@1" in read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    records = read_dump(tmp_path / "run" / "rollouts" / "1.jsonl")
    assert {r.data_source for r in records} == {"sortfile"}


def test_a_parquet_dataset_with_the_gsm8k_checker_trains_two_steps(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{**r, "reward_model": {"ground_truth": str(len(str(r["prompt"])))}} for r in _verl_rows(120)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "lengths.parquet")
    val = tmp_path / "val.jsonl"
    val.write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    cfg = tiny_config(tmp_path / "run", "--run.steps", "2", "--run.plots", "false", "--task", "dataset",
                      "--task.train_file", str(tmp_path / "lengths.parquet"), "--task.val_file", str(val),
                      "--task.reward", "gsm8k")  # fmt: skip
    train(cfg)
    assert [r["step"] for r in _steps(tmp_path / "run")] == [1, 2]


def test_the_calculator_task_runs_tool_turns_with_observations_out_of_the_loss(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    # 40 warm-up steps: enough for the base to call the tool (so episodes have several turns), ~10 s here
    cfg = tiny_config(tmp_path / "run", "--run.steps", "2", "--run.plots", "false", "--task", "calculator",
                      "--task.train_size", "400", "--task.val_size", "12", "--warmup.steps", "40")  # fmt: skip
    train(cfg)
    rows = _steps(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2] and all(r["rollout/num_turns_mean"] >= 1.0 for r in rows)
    records = [
        r
        for step in (1, 2)
        for r in read_dump(tmp_path / "run" / "rollouts" / f"{step}.jsonl")
        if r.status is TrajectoryStatus.OK
    ]
    multi = [r for r in records if NOT_SAMPLED in r.token_versions]
    assert multi, "no episode called the tool: the warm-up base never produced a well-formed call"
    for r in multi:
        assert "=" in r.response and ";" in r.response  # the tool's observations are in the response text
        sampled = [v for v in r.token_versions if v != NOT_SAMPLED]
        assert sampled and set(sampled) == {r.step - 1}
        n = len(r.prompt_ids) + len(r.response_ids)
        assert r.routing is not None and len(r.routing) == n - 1 and r.routing.missing(n) == []


def test_the_scratchpad_task_trains_on_whole_traces_and_scores_only_the_final_answer(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    cfg = tiny_config(tmp_path / "run", "--run.steps", "2", "--run.plots", "false", "--task", "scratchpad",
                      "--task.train_size", "300", "--task.val_size", "8", "--task.sort.max_len", "6",
                      "--warmup.steps", "30")  # fmt: skip
    assert cfg.task.kind == "scratchpad" and cfg.rollout.max_new_tokens == 0  # the budget: the longest trace + EOS
    train(cfg)
    rows = _steps(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    records = [r for step in (1, 2) for r in read_dump(tmp_path / "run" / "rollouts" / f"{step}.jsonl")]
    assert records and max(len(r.response_ids) for r in records) > 12  # traces, not bare answers
    assert max(len(r.response_ids) for r in records) <= 6 * 9 + 1
    answered = [r for r in records if ">" in r.response and r.response.rsplit(">", 1)[1]]
    assert answered, "no response reached its answer: the warm-up base never closed a trace"
    for r in answered:  # the reward read the text after the last '>', not the whole response
        assert r.pred == r.response.rsplit(">", 1)[1].strip()
        assert r.reward == (1.0 if r.pred == r.ground_truth else 0.0)
