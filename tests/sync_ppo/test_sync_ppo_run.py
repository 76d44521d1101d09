"""End to end on a tiny model: every artifact of the run directory, no padding in dumps, exact resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from run_lifecycle import read_metrics
from trainers import PADDING_DATA_SOURCE
from trainers.dumps import read_dump
from trainers.sync_ppo.config import SyncConfig
from trainers.sync_ppo.trainer import train

VOLATILE = ("timing/", "perf/")  # wall-clock metrics differ between any two runs


def _stable(row: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in row.items() if not k.startswith(VOLATILE)}


def test_tiny_run_writes_every_artifact_and_dumps_no_padding(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    # 4 prompts x 3 samples = 12 samples; 5 mini-batches force 3 inert pads per step
    cfg = tiny_config(tmp_path / "run", "--run.steps", "2", "--train.mini_batches_per_step", "5",
                      "--validation.samples_per_prompt", "2")  # fmt: skip
    summary = train(cfg)
    root = tmp_path / "run"
    rows = read_metrics(root / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert {"val-core/addition/acc/mean@1", "val-core/sort/acc/mean@2", "val/greedy_acc"} <= rows[0].keys()
    assert "val-aux/sort/acc/pass@2" in rows[2]
    assert all(r["rollout/num_padding"] == 3.0 and r["rollout/num_samples"] == 12.0 for r in rows[1:])
    assert all("mismatch/replay/abs_diff_mean" in r and "mismatch/no_replay/abs_diff_mean" in r for r in rows[1:])
    assert (root / "config.toml").read_text().startswith("[run]")
    for step in (1, 2):
        records = read_dump(root / "rollouts" / f"{step}.jsonl")
        assert len(records) == 12 and len({r.uid for r in records}) == 12
        assert all(r.data_source != PADDING_DATA_SOURCE and r.step == step for r in records)
        assert all(
            r.routing is not None and len(r.routing) == len(r.prompt_ids) + len(r.response_ids) - 1 for r in records
        )
    for step in (0, 2):
        assert len(read_dump(root / "validation" / f"{step}.jsonl")) == 8 * 3  # greedy + 2 samples per prompt
    assert (root / "checkpoints" / "2" / "COMPLETE").exists()
    assert json.loads((root / "checkpoints" / "2" / "progress.json").read_text())["version"] == 2
    assert (root / "plots" / "training.png").stat().st_size > 10_000
    assert summary.steps == 2 and summary.base == rows[0]["val/greedy_acc"]
    assert summary.details.mismatch_replay is not None and summary.details.mismatch_replay < 2e-6


def test_resume_gives_the_same_metrics_as_an_uninterrupted_run(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    straight = tiny_config(tmp_path / "a", "--run.steps", "3")
    train(straight)
    interrupted = tiny_config(tmp_path / "b", "--run.steps", "1")
    train(interrupted)
    resumed = tiny_config(tmp_path / "b", "--resume", "--run.steps", "3")
    train(resumed, resume=True)
    a = read_metrics(tmp_path / "a" / "metrics.jsonl")
    b = read_metrics(tmp_path / "b" / "metrics.jsonl")
    assert [r["step"] for r in b] == [0, 1, 2, 3]
    assert [_stable(r) for r in a[2:]] == [_stable(r) for r in b[2:]]  # every metric after the resume point
    # step 1 was the short run's last step, so it validated there as well; the training metrics agree
    assert _stable(a[1]).items() <= _stable(b[1]).items()
    for step in (2, 3):
        left = read_dump(tmp_path / "a" / "rollouts" / f"{step}.jsonl")
        right = read_dump(tmp_path / "b" / "rollouts" / f"{step}.jsonl")
        assert left == right


def test_rollout_compile_decode_flag_reaches_the_engine(tmp_path: Path, tiny_config: Callable[..., SyncConfig]) -> None:
    import asyncio

    from trainers.sync_ppo.trainer import _build

    assert not asyncio.run(_build(tiny_config(tmp_path / "eager"))).engine.decode_compiled
    compiled = asyncio.run(_build(tiny_config(tmp_path / "compiled", "--rollout.engine.compile_decode", "true")))
    assert compiled.engine.config.compile_decode and compiled.engine.decode_compiled
