"""The VeOmni backend's config and driver side, in the default environment (no VeOmni): a bad rank count, a model
family VeOmni cannot train or a missing installation is a clear error, and what crosses the rank pipes is copied,
never shared."""

from __future__ import annotations

import multiprocessing as mp
import pickle
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from moe_models import FAMILY_NAMES
from trainers import TrainLoopConfig
from trainers.algorithm import PPOConfig
from trainers.backend import OptimConfig
from trainers.backend.config import VeOmniBackendConfig
from trainers.backend.veomni.support import VEOMNI_UNSERVED
from trainers.rank_worker import portable, receive, send
from trainers.step_metrics import NonFiniteError
from trainers.step_runner import build_steps
from trainers.step_spec import StepSpec


@pytest.mark.parametrize("field", ["ranks", "torch_threads"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_veomni_config_refuses_a_rank_or_thread_count_that_is_not_a_positive_int(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"backend.{field}: expected an int >= 1"):
        VeOmniBackendConfig(**{field: value})  # type: ignore[arg-type]


def test_veomni_trains_qwen3_moe() -> None:
    assert VeOmniBackendConfig().unsupported_family("qwen3_moe") == ""


@pytest.mark.parametrize(
    ("family", "reason"),
    [
        ("qwen2_moe", "VeOmni 0.1.12 has no Qwen2-MoE model"),
        ("mixtral", "VeOmni 0.1.12 has no Mixtral model"),
        ("deepseek_v3", "VeOmni 0.1.12's DeepSeek-V3 MoE block never calls its router-replay hook"),
        ("gpt_oss", "VeOmni 0.1.12's GPT-OSS MoE block never calls its router-replay hook"),
    ],
)
def test_veomni_refuses_a_family_it_cannot_train_and_says_why(family: str, reason: str) -> None:
    got = VeOmniBackendConfig().unsupported_family(family)
    assert got.startswith(f"backend.kind veomni builds and maps ['qwen3_moe'] models only, got a {family} model: ")
    assert reason in got


def test_every_model_family_is_either_trained_by_veomni_or_refused_with_a_reason() -> None:
    served = set(VeOmniBackendConfig.families)
    assert served | set(VEOMNI_UNSERVED) == set(FAMILY_NAMES)
    assert not served & set(VEOMNI_UNSERVED)


@pytest.mark.skipif(find_spec("veomni") is not None, reason="this environment has VeOmni")
def test_building_veomni_steps_without_veomni_names_the_script_that_builds_its_environment(tmp_path: Path) -> None:
    spec = StepSpec(
        str(tmp_path),
        PPOConfig(),
        TrainLoopConfig(),
        OptimConfig(),
        max_new_tokens=8,
        temperature=1.0,
        seed=0,
        total_steps=1,
    )
    with pytest.raises(ValueError, match=r"veomni not installed.*bash scripts/test_veomni\.sh"):
        build_steps(VeOmniBackendConfig(), spec)


def test_tensors_cross_the_rank_pipe_by_value_not_as_shared_memory() -> None:
    left, right = mp.get_context("spawn").Pipe()
    try:
        state = {"optim.0.step": torch.tensor(2.0)}
        left.send(state)  # multiprocessing's pickler: torch moves the storage to shared memory
        assert right.recv()["optim.0.step"].is_shared()
        send(left, state)
        got = receive(right)
        assert not got["optim.0.step"].is_shared()  # type: ignore[index]
        got["optim.0.step"] += 1  # type: ignore[index]
        assert float(state["optim.0.step"]) == 2.0
    finally:
        left.close()
        right.close()


def test_a_rank_error_crosses_the_pipe_as_itself_or_with_its_traceback() -> None:
    err = portable(NonFiniteError("loss is nan", metric="actor/loss", step=3))
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, NonFiniteError) and (back.metric, back.step, str(back)) == ("actor/loss", 3, "loss is nan")

    class Local(Exception):  # not importable by name: cannot be unpickled in the driver
        pass

    try:
        raise Local("boom")
    except Local as exc:
        wrapped = portable(exc)
    assert type(wrapped).__name__ == "RankFailure" and "boom" in str(wrapped) and "Traceback" in str(wrapped)
