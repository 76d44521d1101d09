"""apps/async_ppo with its trainer actor on a backend whose ranks it spawns (2 gloo ranks): VeOmni (FSDP2) and
Megatron-Core (experts split over both ranks; Qwen3-MoE, and DeepSeek-V3 with multi-latent attention). Staleness
bounded, router replay on, the behaviour probe reading the ranks' weights. Each case needs its dependency group
(`bash scripts/test_veomni.sh`, `bash scripts/test_megatron.sh`) and is skipped elsewhere."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest
from async_pipeline.async_ppo.config import AsyncConfig
from async_pipeline.async_ppo.pipeline import train
from async_pipeline.ray_session.config import RayConfig
from async_pipeline.ray_session.session import LocalRay
from run_lifecycle import read_metrics


def _needs(library: str, marker: pytest.MarkDecorator, script: str) -> list[pytest.MarkDecorator]:
    return [marker, pytest.mark.skipif(find_spec(library) is None, reason=f"no {library} here: run bash {script}")]


BACKENDS = [
    pytest.param(("--backend.kind", "veomni", "--backend.ranks", "2"), id="veomni",
                 marks=_needs("veomni", pytest.mark.veomni, "scripts/test_veomni.sh")),
    pytest.param(("--backend.kind", "megatron", "--backend.ranks", "2", "--backend.expert_parallel", "2"),
                 id="megatron", marks=_needs("megatron", pytest.mark.megatron, "scripts/test_megatron.sh")),
    pytest.param(("--backend.kind", "megatron", "--backend.ranks", "2", "--backend.expert_parallel", "2",
                  "--model.family", "deepseek_v3"),
                 id="megatron-deepseek_v3", marks=_needs("megatron", pytest.mark.megatron, "scripts/test_megatron.sh")),
]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def ray_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    local = LocalRay.start(
        RayConfig(temp_dir=f"/tmp/apv_{id(tmp_path_factory) % 10**6}"), num_cpus=2, log_to_driver=False
    )
    yield
    local.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_ppo_trains_on_rank_processes_with_replay(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig], backend: tuple[str, ...]
) -> None:
    run = tmp_path / "run"
    summary = train(tiny_config(run, "--run.steps", "3", "--pipeline.max_staleness", "1", *backend))
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "timing/train_s" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert max(r["staleness/sample_max"] for r in rows) <= 1.0
    assert all(r["mismatch/replay/tokens"] == 0 or r["mismatch/replay/abs_diff_max"] < 1e-5 for r in rows)
    assert any(r["mismatch/replay/tokens"] > 0 for r in rows)
    assert (run / "checkpoints" / "3" / "COMPLETE").exists()
    assert summary.final is not None
