"""Every choice a config offers runs: each algorithm (on-policy distillation with a tiny cached teacher included),
advantage estimator, KL mode and rollout correction trains
two steps of the app on the tiny task, and the metrics of the choice appear."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from run_lifecycle import read_metrics
from trainers.distillation.teacher import ensure_teacher
from trainers.dumps import read_dump
from trainers.sync_ppo.config import SyncConfig
from trainers.sync_ppo.trainer import train

pytestmark = pytest.mark.slow

TEACHER = ["--teacher.model_preset", "tiny", "--teacher.warmup_steps", "12"]  # a cached teacher, built in seconds
CHOICES = {
    "ppo-recompute": (["--algorithm.old_log_probs", "recompute"], "actor/pg_clipfrac"),
    "gspo": (["--algorithm", "gspo"], "actor/pg_clipfrac"),
    "decoupled-tis": (["--algorithm.kind", "decoupled", "--algorithm.is_cap", "2"], "actor/behaviour_is_mean"),
    "drgrpo": (["--algorithm.advantage", "drgrpo"], "actor/pg_loss"),
    "rloo": (["--algorithm.advantage", "rloo"], "actor/pg_loss"),
    "reinforce_pp": (["--algorithm.advantage", "reinforce_pp", "--algorithm.gamma", "0.99"], "actor/pg_loss"),
    "reinforce_pp_baseline": (["--algorithm.advantage", "reinforce_pp_baseline"], "actor/pg_loss"),
    "gae": (["--algorithm.advantage", "gae", "--algorithm.lam", "0.95"], "actor/pg_loss"),
    "kl-loss": (["--algorithm.kl.coef", "0.05", "--algorithm.kl.estimator", "k3+"], "actor/kl_loss"),
    "kl-reward": (["--algorithm.kl.coef", "0.05", "--algorithm.kl.mode", "reward"], "kl_penalty/kl_mean"),
    "seq-mean-token-sum-norm": (["--algorithm.agg_mode", "seq-mean-token-sum-norm"], "actor/pg_loss"),
    "token-tis": (["--algorithm.correction.is_level", "token", "--algorithm.correction.is_cap", "2",
                   "--algorithm.old_log_probs", "recompute"], "rollout_corr/is_mean"),
    "seq-icepop": (["--algorithm.correction.is_level", "sequence", "--algorithm.correction.is_band", "0.5,2",
                    "--algorithm.old_log_probs", "recompute"], "rollout_corr/is_ess"),
    "rejection": (["--algorithm.correction.reject_token", "0.5,2", "--algorithm.correction.reject_seq_mean",
                   "0.8,1.25"], "rollout_corr/masked_token_frac"),
    "mini-batches": (["--train.mini_batches_per_step", "2", "--train.ppo_epochs", "2"], "actor/grad_norm_max"),
    "opd-pg-top-k": (["--algorithm.kind", "opd", *TEACHER, "--teacher.top_k", "4"], "opd/outside_top_k"),
    "opd-k3-reward": (["--algorithm.kind", "opd", *TEACHER, "--algorithm.loss", "k3", "--algorithm.reward_coef",
                       "0.5"], "opd/kl_loss"),
    "opd-topk-fkl": (["--algorithm.kind", "opd", *TEACHER, "--algorithm.loss", "topk_fkl", "--teacher.top_k", "3"],
                     "opd/fkl_loss"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CHOICES))
def test_each_choice_trains_two_steps_and_reports_its_metric(
    name: str, tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    flags, key = CHOICES[name]
    cfg = tiny_config(tmp_path / "run", "--run.steps", "2", "--run.plots", "false", *flags)
    train(cfg)
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(key in r and math.isfinite(r[key]) for r in rows), (key, rows[-1].keys())
    assert all(r["actor/optimizer_steps"] >= 1 for r in rows)


def test_a_named_teacher_scores_its_data_source_and_the_default_teacher_the_rest(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    cfg = tiny_config(tmp_path / "probe", "--algorithm.kind", "opd", *TEACHER)
    # built here once and cached, so the run below reuses it
    named = ensure_teacher(cfg.teacher, cfg.task.build(), cfg.warmup, cfg.model, Path(cfg.run.warmup_cache))
    run = tmp_path / "run"
    train(tiny_config(run, "--run.steps", "2", "--run.plots", "false", "--algorithm.kind", "opd", *TEACHER,
                      "--teacher.sources", f"sort={named.directory}"))  # fmt: skip
    rows = [r for r in read_metrics(run / "metrics.jsonl") if r["step"] > 0]
    for step, row in zip((1, 2), rows, strict=True):
        sources = [r.data_source for r in read_dump(run / "rollouts" / f"{step}.jsonl") if r.status.value == "ok"]
        assert row["teacher/samples/sort"] == sources.count("sort") > 0
        assert row["teacher/samples/default"] == sources.count("addition") > 0
