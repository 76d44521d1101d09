"""SGLang as the rollout engine: two steps of the app against the in-process server that speaks SGLang's wire
format (SGLang itself does not run on this CPU). Weights reach it as HF folders loaded with
`update_weights_from_disk`; every trained token carries the version that sampled it and every routing row
replays in the trainer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from engine_adapters.sglang import ModelShape
from engine_adapters.testing.fake_sglang import FakeSGLangServer
from rollout_core import TrajectoryStatus
from run_lifecycle import read_metrics
from trainers.dumps import read_dump
from trainers.recipe.setup import prepare_run
from trainers.sync_ppo.config import SyncConfig
from trainers.sync_ppo.trainer import train

pytestmark = pytest.mark.slow


def test_two_steps_with_sglang_push_weights_and_replay_its_routing(
    tmp_path: Path, tiny_config: Callable[..., SyncConfig]
) -> None:
    base = prepare_run(tiny_config(tmp_path / "probe")).base_dir
    shape = ModelShape.from_hf_config(base)
    assert shape.routing_spec is not None
    spec = shape.routing_spec
    server = FakeSGLangServer(
        vocab_size=shape.vocab_size,
        num_layers=spec.num_layers,
        top_k=spec.top_k,
        num_experts=spec.num_experts,
        token_delay=0.0,
    )
    try:
        cfg = tiny_config(tmp_path / "run", "--run.steps", "2", "--run.plots", "false", "--rollout.engine", "sglang",
                          "--rollout.engine.urls", server.url)  # fmt: skip
        train(cfg)
    finally:
        server.stop()
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows if "actor/pg_loss" in r] == [1, 2]
    assert [r["engine/weight_version"] for r in rows if r["step"] > 0] == [1.0, 2.0]
    loads = [r for r in server.state.requests if r["path"] == "/update_weights_from_disk"]
    assert [r["weight_version"] for r in loads] == ["1", "2"]
    for step in (1, 2):
        records = [
            r for r in read_dump(tmp_path / "run" / "rollouts" / f"{step}.jsonl") if r.status is TrajectoryStatus.OK
        ]
        assert records and all(set(r.token_versions) == {step - 1} for r in records)
        assert all(len(r.routing) == len(r.prompt_ids) + len(r.response_ids) - 1 for r in records)
