"""Sync is async with zero staleness: on the same tiny task and seed, `apps/async_ppo --pipeline.max_staleness 0`
trains on the same data as `apps/sync_ppo` (same rewards, lengths, accuracies; the loss to float noise)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_lifecycle import read_metrics

pytestmark = pytest.mark.slow

TINY = [
    "--task.train_size", "400", "--task.val_size", "12", "--task.addition_weight", "0.5", "--task.sort_weight", "0.5",
    "--warmup.steps", "8", "--warmup.examples_per_step", "16",
    "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "3", "--rollout.engine.slots", "16",
    "--run.steps", "3", "--train.mismatch_sample_seqs", "4", "--validation.every_steps", "3",
    "--validation.max_prompts", "8", "--run.progress", "false", "--run.plots", "false",
]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def ray_session() -> Iterator[None]:
    """One loopback-only Ray for the module, its temp dir removed afterwards (as the app's own)."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    from async_pipeline.ray_session.config import RayConfig
    from async_pipeline.ray_session.session import LocalRay

    local = LocalRay.start(RayConfig(temp_dir=f"/tmp/apps_eq_{os.getpid()}"), num_cpus=2, log_to_driver=False)
    yield
    local.stop()


def test_max_staleness_zero_gives_the_metrics_of_sync_ppo(tmp_path: Path) -> None:
    from async_pipeline.async_ppo.pipeline import train as async_train
    from async_ppo.cli import parse as async_parse
    from sync_ppo.cli import parse as sync_parse
    from trainers.sync_ppo.trainer import train as sync_train

    flags = [*TINY, "--run.warmup_cache", str(tmp_path / "warmup")]
    sync_train(sync_parse([*flags, "--run.dir", str(tmp_path / "sync")])[0])
    async_train(async_parse([*flags, "--run.dir", str(tmp_path / "async"), "--pipeline.max_staleness", "0"])[0])
    sync_rows = {r["step"]: r for r in read_metrics(tmp_path / "sync" / "metrics.jsonl")}
    async_rows: dict[object, dict[str, object]] = {}
    for r in read_metrics(tmp_path / "async" / "metrics.jsonl"):
        async_rows.setdefault(r["step"], {}).update(r)
    for key in (
        "reward/mean",
        "rollout/num_samples",
        "rollout/response_length_mean",
        "val/greedy_acc",
        "rollout/generated_tokens",
        "rollout/num_padding",
        "rollout/groups_all_equal_frac",
    ):
        for step in (1, 2, 3):
            if key in sync_rows[step]:
                assert async_rows[step][key] == pytest.approx(sync_rows[step][key], abs=1e-9), (key, step)
    for step in (1, 2, 3):  # same data, same order: the loss agrees to float noise
        assert math.isclose(async_rows[step]["actor/pg_loss"], sync_rows[step]["actor/pg_loss"], abs_tol=1e-5)
        assert async_rows[step]["staleness/sample_max"] == 0.0
    assert async_rows[0]["val/greedy_acc"] == sync_rows[0]["val/greedy_acc"]
