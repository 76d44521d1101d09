"""Tiny async PPO settings (the same task and warm-up as tests/sync_ppo, so both trainers can be compared)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the uniquely named helper modules next to this file

from async_pipeline.async_ppo.config import AsyncConfig
from async_ppo.cli import parse
from async_ppo_helpers import TINY

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
torch.set_num_threads(1)


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
