"""bf16 rollouts in the app: a run with a bf16 engine (and bf16 trainer compute) trains and reports the mismatch
with and without replay side by side; the precision probe runs on a real step and its report names a divergence;
the probe is refused where it cannot run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from moe_models.precision_report import report
from run_lifecycle import read_metrics
from trainers.sync_ppo.config import SyncConfig
from trainers.sync_ppo.trainer import train

pytestmark = pytest.mark.slow


def test_a_bf16_engine_run_trains_and_shows_replay_against_no_replay(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    run = tmp_path / "run"
    cfg = tiny_config(run, "--run.steps", "2", "--rollout.engine.dtype", "bfloat16", "--backend.compute_dtype",
                      "bfloat16", "--debug.precision_steps", "2", "--debug.precision_samples", "3")  # fmt: skip
    train(cfg)
    rows = [r for r in read_metrics(run / "metrics.jsonl") if r["step"] > 0]
    for row in rows:
        assert row["mismatch/sample_replay/k3"] > 0 and row["mismatch/no_replay/k3"] > 0  # bf16 vs bf16-autocast
    text = report(run, None, 1e-6)
    assert "step_2.jsonl: 3 samples" in text and "first divergence: layer" in text
    assert (run / "plots").is_dir()


def test_the_precision_probe_is_refused_without_a_native_engine_or_a_torch_backend(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    with pytest.raises(ValueError, match=r"rollout\.engine\.kind native"):
        tiny_config(tmp_path / "a", "--rollout.engine", "vllm", "--debug.precision_steps", "1")
    with pytest.raises(ValueError, match=r"needs backend\.kind torch, got veomni"):
        tiny_config(tmp_path / "a", "--backend.kind", "veomni", "--debug.precision_steps", "1")


def test_true_on_policy_mode_gives_a_mismatch_of_exactly_zero_over_a_run(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    run = tmp_path / "run"
    train(
        tiny_config(run, "--run.steps", "2", "--numerics.true_on_policy", "true", "--train.mismatch_sample_seqs", "4")
    )
    rows = [r for r in read_metrics(run / "metrics.jsonl") if r["step"] > 0]
    keys = [k for k in rows[0] if k.startswith("mismatch/") and not k.endswith("/tokens")]
    assert keys and all(rows[0][f"{k.rsplit('/', 1)[0]}/tokens"] > 0 for k in keys)
    assert all(r[k] == 0.0 for r in rows for k in keys), {k: rows[-1][k] for k in keys}


def test_true_on_policy_mode_is_refused_where_it_cannot_be_exact(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    for flags in (
        ["--rollout.engine.dtype", "bfloat16"],
        ["--rollout.engine.compile_decode", "true"],
        ["--backend.compute_dtype", "bfloat16"],
        ["--backend.kind", "veomni"],
        ["--backend.kind", "megatron"],
    ):
        with pytest.raises(ValueError, match=r"numerics\.true_on_policy"):
            tiny_config(tmp_path / "run", "--numerics.true_on_policy", "true", *flags)
