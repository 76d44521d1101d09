"""Tiny async PPO settings (the same task and warm-up as tests/sync_ppo, so both trainers can be compared)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the uniquely named helper modules next to this file

from async_ppo.cli import parse
from async_ppo.config import AsyncConfig
from async_ppo_helpers import TASK

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
torch.set_num_threads(1)

TINY = [
    *TASK,
    "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "3", "--rollout.engine.slots", "16",
    "--train.mismatch_sample_seqs", "4", "--validation.every_steps", "2", "--validation.max_prompts", "8",
    "--run.progress", "false", "--run.plots", "false", "--run.checkpoint_every", "1", "--run.keep_checkpoints", "10",
]  # fmt: skip


@pytest.fixture(scope="session")
def warmup_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("async-warmup-cache")


@pytest.fixture
def tiny_config(warmup_cache: Path) -> Callable[..., AsyncConfig]:
    """`tiny_config(run_dir, *extra_flags)`: the tiny settings plus the test's own flags."""

    def make(run_dir: Path, *flags: str) -> AsyncConfig:
        cfg, _ = parse([*TINY, "--run.warmup_cache", str(warmup_cache), "--run.dir", str(run_dir), *flags])
        return cfg

    return make
