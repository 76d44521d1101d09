"""On-policy distillation in the async pipeline (one Ray session for the module, 3 logical CPUs: trainer, rollouter
and a one-replica teacher pool): every trained sample carries its teacher's scores, a teacher replica that dies is
restarted and its pending call redone, a pool the cluster cannot hold fails naming what is missing, and a vLLM
teacher (marker `vllm`) serves the scores from a server its replica owns."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from async_pipeline.async_ppo.config import AsyncConfig
from async_pipeline.async_ppo.pipeline import train
from async_pipeline.ray_session.config import RayConfig
from async_pipeline.ray_session.session import LocalRay
from engine_adapters.vllm import default_python
from run_lifecycle import read_metrics
from trainers.distillation.teacher import ensure_teacher
from trainers.dumps import read_dump

pytestmark = pytest.mark.slow

TEACHER = ["--algorithm.kind", "opd", "--teacher.model_preset", "tiny", "--teacher.warmup_steps", "12"]


@pytest.fixture(scope="module", autouse=True)
def ray_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    local = LocalRay.start(
        RayConfig(temp_dir=f"/tmp/apo_{id(tmp_path_factory) % 10**6}"), num_cpus=3, log_to_driver=False
    )
    yield
    local.stop()


def test_async_opd_trains_on_teacher_scores_through_a_teacher_crash(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    run = tmp_path / "run"
    # replica 0 dies on its 3rd call, with that call pending: Ray restarts it and runs the call again
    train(tiny_config(run, "--run.steps", "3", *TEACHER, "--teacher.top_k", "3",
                      "--faults.teacher_crash_after_calls", "3"))  # fmt: skip
    rows = read_metrics(run / "metrics.jsonl")
    train_rows = [r for r in rows if "timing/train_s" in r]
    assert [r["step"] for r in train_rows] == [1, 2, 3]
    assert all(math.isfinite(r["opd/reverse_kl"]) and r["teacher/tokens_per_s"] > 0 for r in train_rows)
    assert all("opd/outside_top_k" in r and 0 < r["teacher/top_k_mass"] <= 1 for r in train_rows)
    assert train_rows[-1]["fault/teacher_restarts"] == 1.0
    assert sum(r["rollout/num_samples"] for r in train_rows) == 3 * 4 * 3  # every group trained, none lost
    assert "teacher/val_acc" in next(r for r in rows if r["step"] == 0)


def test_each_group_is_scored_by_its_data_sources_teacher_and_the_rest_by_the_default_teacher(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    cfg = tiny_config(tmp_path / "probe", *TEACHER)
    # built here once and cached, so the run below reuses it
    named = ensure_teacher(cfg.teacher, cfg.task.build(), cfg.warmup, cfg.model, Path(cfg.run.warmup_cache))
    run = tmp_path / "run"
    # two teachers of one replica each, half a CPU apiece: the module's 3 CPUs hold trainer, rollouter and pool
    train(tiny_config(run, "--run.steps", "2", *TEACHER, "--teacher.sources", f"addition={named.directory}",
                      "--teacher.cpus", "0.5"))  # fmt: skip
    last = [r for r in read_metrics(run / "metrics.jsonl") if "timing/train_s" in r][-1]
    sources = [r.data_source for step in (1, 2) for r in read_dump(run / "rollouts" / f"{step}.jsonl")]
    groups = {s: sources.count(s) // 3 for s in set(sources)}  # 3 responses per group, one call per group
    assert set(groups) == {"addition", "sort"}
    # the rollouter runs a step ahead: groups scored for step 3 were never trained, hence >=
    assert last["teacher/calls/addition"] >= groups["addition"] and last["teacher/calls/default"] >= groups["sort"]


def test_a_teacher_pool_the_cluster_cannot_hold_fails_naming_what_is_missing(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    cfg = tiny_config(
        tmp_path / "run", "--run.steps", "1", *TEACHER, "--teacher.replicas", "2", "--ray.startup_timeout_s", "3"
    )
    with pytest.raises(RuntimeError, match=r"could not reserve the teacher pool .*teacher.replicas 2 x teacher.cpus"):
        train(cfg)


@pytest.mark.vllm
@pytest.mark.skipif(not default_python().exists(), reason="vLLM environment absent: run scripts/setup_vllm_env.sh")
@pytest.mark.timeout(900)
def test_a_vllm_teacher_replica_serves_the_scores_and_its_server_ends_with_the_run(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    run = tmp_path / "run"
    train(tiny_config(run, "--run.steps", "2", *TEACHER, "--teacher.engine", "vllm", "--teacher.top_k", "3"))
    train_rows = [r for r in read_metrics(run / "metrics.jsonl") if "timing/train_s" in r]
    assert [r["step"] for r in train_rows] == [1, 2]
    assert all(math.isfinite(r["opd/reverse_kl"]) and 0 < r["teacher/top_k_mass"] <= 1 for r in train_rows)
    log = run / "teacher" / "default" / "replica-0" / "vllm-teacher.log"
    assert log.exists() and log.stat().st_size > 0
    # the only vLLM server of this test is the teacher's (the rollout engine is native)
    left = subprocess.run(["pgrep", "-f", "vllm.entrypoints.openai.api_server"], capture_output=True, text=True)
    assert not left.stdout.split(), f"vLLM teacher processes outlived the run: {left.stdout.split()}"
