"""The native engine as a rollout engine (`EngineConfig.build`): its C-kernel threads follow the CPUs its site may
use unless set, so an async rollouter (one thread) never takes the trainer's core."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_adapters.native.testing import tiny_model
from moe_models import save_pretrained
from rollout_core.native_engine_config import EngineConfig, usable_cores


@dataclass(frozen=True)
class Site:
    """A `engine_adapters.native.rollout_engine.RolloutSite`."""

    checkpoint_dir: str
    cpu_threads: int
    max_len: int = 64
    seed: int = 0
    true_on_policy: bool = False
    vocab_size: int | None = None

    def threads(self) -> int:
        return self.cpu_threads or usable_cores()


def _built_kernel_threads(cfg: EngineConfig, tmp_path: Path, cpu_threads: int) -> int:
    save_pretrained(tiny_model(), tmp_path / "ckpt")

    async def run() -> int:
        engine = await cfg.build(Site(str(tmp_path / "ckpt"), cpu_threads))
        try:
            return engine.config.kernel_threads
        finally:
            await engine.close()

    return asyncio.run(run())


@pytest.mark.parametrize("cpu_threads", [1, 3])
def test_kernel_threads_zero_follows_the_sites_cpu_threads(cpu_threads: int, tmp_path: Path):
    assert _built_kernel_threads(EngineConfig(slots=2, kernel_threads=0), tmp_path, cpu_threads) == cpu_threads


def test_a_site_without_cpu_threads_uses_every_core_the_process_may_run_on(tmp_path: Path):
    assert _built_kernel_threads(EngineConfig(slots=2, kernel_threads=0), tmp_path, 0) == usable_cores()


def test_an_explicit_kernel_threads_wins_over_the_site(tmp_path: Path):
    assert _built_kernel_threads(EngineConfig(slots=2, kernel_threads=3), tmp_path, 1) == 3


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_a_bad_kernel_threads_is_refused_with_what_was_expected(bad: object):
    with pytest.raises(ValueError, match=r"rollout.engine.kernel_threads: expected an int >= 0, got"):
        EngineConfig(kernel_threads=bad)  # type: ignore[arg-type]
