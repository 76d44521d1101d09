"""RankGroup: VeOmni ranks in processes of their own behind `StepRunner`; checkpoints resume bit for bit, weights
come back in our names, a rank's error reaches the driver as itself. Needs the `veomni` group."""

from __future__ import annotations

import dataclasses
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from trainers.algorithm import PPOConfig
from trainers.backend import OptimConfig
from trainers.backend.config import VeOmniBackendConfig
from trainers.step_runner import build_steps
from trainers.step_spec import StepSpec
from trainers_fixtures import rank_batch, rank_spec

pytestmark = [
    pytest.mark.veomni,
    pytest.mark.skipif(find_spec("veomni") is None, reason="no VeOmni here: run bash scripts/test_veomni.sh"),
]


def _spec(tmp_path: Path) -> StepSpec:
    return rank_spec(tmp_path, PPOConfig(), OptimConfig(lr=1e-2, schedule="cosine"))


def test_a_rank_group_checkpoint_resumes_bit_for_bit(tmp_path: Path) -> None:
    spec, batch = _spec(tmp_path), rank_batch()
    group = build_steps(VeOmniBackendConfig(ranks=2), spec)
    try:
        group.train_step(batch)
        group.state_dict().save(tmp_path / "state")
        want = [group.train_step(batch).metrics for _ in range(2)]
        want_weights, version = group.export_weights()
    finally:
        group.close()
    from trainers.backend import BackendState

    resumed = build_steps(VeOmniBackendConfig(ranks=2), spec)
    try:
        resumed.load_state_dict(BackendState.load(tmp_path / "state"))
        assert resumed.version == 1
        got = [resumed.train_step(batch).metrics for _ in range(2)]
        got_weights, got_version = resumed.export_weights()
    finally:
        resumed.close()
    assert got == want and got_version == version == 3
    assert got_weights.keys() == want_weights.keys()
    assert all(torch.equal(got_weights[k], want_weights[k]) for k in want_weights)


def test_the_policy_model_is_ours_with_the_ranks_weights(tmp_path: Path) -> None:
    group = build_steps(VeOmniBackendConfig(ranks=2), _spec(tmp_path))
    try:
        before = {k: v.clone() for k, v in group.policy_model().state_dict().items()}
        group.train_step(rank_batch())
        weights, _ = group.export_weights()
        model = group.policy_model()
    finally:
        group.close()
    assert type(model).__name__ == "MoEForCausalLM"
    assert weights.keys() == model.state_dict().keys()  # our names and layout, nothing left over
    assert all(torch.equal(model.state_dict()[k], weights[k]) for k in weights)
    assert any(not torch.equal(before[k], weights[k]) for k in weights)


def test_a_rank_error_reaches_the_driver_and_the_group_keeps_serving(tmp_path: Path) -> None:
    group = build_steps(VeOmniBackendConfig(ranks=2), _spec(tmp_path))
    try:
        unrouted = dataclasses.replace(rank_batch(), replay_ids=None, replay_mask=None)
        with pytest.raises(ValueError, match="router replay: expected a batch with routing"):
            group.train_step(unrouted)
        assert group.version == 0
        group.train_step(rank_batch())
        assert group.version == 1
    finally:
        group.close()
    assert all(not p.is_alive() for p in group.processes)
