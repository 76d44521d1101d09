"""A tiny sync PPO configuration whose warm-up base is built once per test session (a few seconds)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `from conftest import TINY` in this folder's modules

from sync_ppo.cli import parse
from sync_ppo.config import SyncConfig

torch.set_num_threads(1)  # tiny matmuls: one intra-op thread is much faster on a shared 2-core machine

TINY = [
    "--warmup.steps", "8", "--warmup.examples_per_step", "16",
    "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "3",
    "--train.mismatch_sample_seqs", "4", "--validation.every_steps", "2", "--validation.max_prompts", "8",
    "--run.progress", "false", "--run.checkpoint_every", "1", "--run.keep_checkpoints", "5",
]  # fmt: skip


TOY_TASK = [
    "--task.train_size", "400", "--task.val_size", "12", "--task.addition_weight", "0.5", "--task.sort_weight", "0.5",
]  # fmt: skip
NATIVE_ENGINE = ["--rollout.engine.slots", "16"]


@pytest.fixture(scope="session")
def warmup_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warmup-cache")


@pytest.fixture
def tiny_config(warmup_cache: Path) -> Callable[..., SyncConfig]:
    """`tiny_config(run_dir, *extra_flags)`: the tiny settings plus the test's own flags; the small toy task and
    the native engine with 16 slots unless the flags choose another `--task` or `--rollout.engine`."""

    def make(run_dir: Path, *flags: str) -> SyncConfig:
        task = [] if "--task" in flags else TOY_TASK
        engine = [] if "--rollout.engine" in flags else NATIVE_ENGINE
        paths = ["--run.warmup_cache", str(warmup_cache), "--run.dir", str(run_dir)]
        cfg, _ = parse([*TINY, *task, *engine, *paths, *flags])
        return cfg

    return make
