"""apps/async_ppo with its trainer actor on the VeOmni backend (2 gloo ranks spawned by the actor): staleness
bounded, router replay on, the behaviour probe reading the ranks' weights. Needs the `veomni` group."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest
from async_ppo.config import AsyncConfig
from async_ppo.pipeline import train
from recipes.ray_config import RayConfig
from recipes.ray_session import LocalRay
from run_logging import read_metrics

pytestmark = [
    pytest.mark.veomni,
    pytest.mark.skipif(find_spec("veomni") is None, reason="no VeOmni here: run bash scripts/test_veomni.sh"),
]


@pytest.fixture(scope="module", autouse=True)
def ray_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    local = LocalRay.start(RayConfig(temp_dir=f"/tmp/apv_{id(tmp_path_factory) % 10**6}"), num_cpus=2,
                           log_to_driver=False)  # fmt: skip
    yield
    local.stop()


def test_async_ppo_trains_on_veomni_ranks_with_replay(tmp_path: Path, tiny_config: Callable[..., AsyncConfig]) -> None:
    run = tmp_path / "run"
    summary = train(tiny_config(run, "--run.steps", "3", "--pipeline.max_staleness", "1", "--backend.kind", "veomni",
                                "--backend.ranks", "2"))  # fmt: skip
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "timing/train_s" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert max(r["staleness/sample_max"] for r in rows) <= 1.0
    assert all(r["mismatch/replay/tokens"] == 0 or r["mismatch/replay/abs_diff_max"] < 1e-5 for r in rows)
    assert any(r["mismatch/replay/tokens"] > 0 for r in rows)
    assert (run / "checkpoints" / "3" / "COMPLETE").exists()
    assert summary.final_val_acc is not None
