"""A tiny sync PPO configuration whose warm-up base is built once per test session (a few seconds)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the uniquely named helper modules next to this file

from sync_ppo.cli import parse
from sync_ppo_helpers import NATIVE_ENGINE, TINY, TOY_TASK
from trainers.sync_ppo.config import SyncConfig

torch.set_num_threads(1)  # tiny matmuls: one intra-op thread is much faster on a shared 2-core machine


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
