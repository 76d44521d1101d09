"""apps/sync_ppo on the backends whose ranks are processes of their own: VeOmni (2 gloo ranks, FSDP2) and
Megatron-Core (2 gloo ranks, experts split over both; Qwen3-MoE, and DeepSeek-V3 with multi-latent attention). Each
trains with router replay, its training metrics follow the torch backend's on the same seed and model, and a
resumed run continues bit for bit. Each case needs its dependency group
(`bash scripts/test_veomni.sh`, `bash scripts/test_megatron.sh`) and is skipped elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

import pytest
from run_lifecycle import read_metrics
from trainers.sync_ppo.config import SyncConfig
from trainers.sync_ppo.trainer import train


def _needs(library: str, marker: pytest.MarkDecorator, script: str) -> list[pytest.MarkDecorator]:
    return [marker, pytest.mark.skipif(find_spec(library) is None, reason=f"no {library} here: run bash {script}")]


MEGATRON = ("--backend.kind", "megatron", "--backend.ranks", "2", "--backend.expert_parallel", "2")
BACKENDS = [  # (backend flags, model flags: the torch run trains the same model)
    pytest.param(("--backend.kind", "veomni", "--backend.ranks", "2"), (), id="veomni",
                 marks=_needs("veomni", pytest.mark.veomni, "scripts/test_veomni.sh")),
    pytest.param(MEGATRON, (), id="megatron",
                 marks=_needs("megatron", pytest.mark.megatron, "scripts/test_megatron.sh")),
    pytest.param(MEGATRON, ("--model.family", "deepseek_v3"), id="megatron-deepseek_v3",
                 marks=_needs("megatron", pytest.mark.megatron, "scripts/test_megatron.sh")),
]  # fmt: skip
VOLATILE = ("timing/", "perf/")


def _stable(row: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in row.items() if not k.startswith(VOLATILE)}


@pytest.mark.parametrize(("backend", "model"), BACKENDS)
def test_sync_ppo_on_rank_processes_follows_the_torch_backend_and_resumes_exactly(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig], backend: tuple[str, ...], model: tuple[str, ...]
) -> None:
    backend = (*backend, *model)
    train(tiny_config(tmp_path / "torch", "--run.steps", "3", *model))
    train(tiny_config(tmp_path / "ranks", "--run.steps", "3", *backend))
    torch_rows = read_metrics(tmp_path / "torch" / "metrics.jsonl")
    rows = read_metrics(tmp_path / "ranks" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    for ours, theirs in zip(rows[1:], torch_rows[1:], strict=True):
        assert ours["mismatch/replay/abs_diff_max"] < 1e-5  # the engine's forward vs the backend's, replayed
        assert ours["mismatch/replay/tokens"] == theirs["mismatch/replay/tokens"]  # all ranks' rows, not rank 0's
        assert "mismatch/no_replay/abs_diff_mean" in ours
        assert ours["actor/pg_loss"] == pytest.approx(theirs["actor/pg_loss"], rel=1e-3, abs=1e-5)
    interrupted = tmp_path / "resumed"
    train(tiny_config(interrupted, "--run.steps", "1", *backend))
    train(tiny_config(interrupted, "--resume", "--run.steps", "3", *backend), resume=True)
    resumed = read_metrics(interrupted / "metrics.jsonl")
    assert [_stable(r) for r in resumed[2:]] == [_stable(r) for r in rows[2:]]
