"""The Megatron backend's config and driver side, in the default environment (no Megatron-Core): a bad layout or a
missing installation is a clear error."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest
from trainers import TrainLoopConfig
from trainers.algorithm import PPOConfig
from trainers.backend import OptimConfig
from trainers.backend.config import MegatronBackendConfig
from trainers.step_runner import build_steps
from trainers.step_spec import StepSpec


@pytest.mark.parametrize("field", ["ranks", "expert_parallel", "torch_threads"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_megatron_config_refuses_a_count_that_is_not_a_positive_int(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"backend.{field}: expected an int >= 1"):
        MegatronBackendConfig(**{field: value})  # type: ignore[arg-type]


def test_megatron_config_refuses_an_expert_split_that_does_not_divide_the_ranks() -> None:
    with pytest.raises(ValueError, match=r"backend.expert_parallel: expected a divisor of backend.ranks \(4\), got 3"):
        MegatronBackendConfig(ranks=4, expert_parallel=3)
    assert MegatronBackendConfig(ranks=4, expert_parallel=2).expert_parallel == 2


@pytest.mark.skipif(find_spec("megatron") is not None, reason="this environment has Megatron-Core")
def test_building_megatron_steps_without_megatron_names_the_script_that_builds_its_environment(tmp_path: Path) -> None:
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
    with pytest.raises(ValueError, match=r"megatron-core 0\.19\.2, got not installed.*bash scripts/test_megatron\.sh"):
        build_steps(MegatronBackendConfig(), spec)


@pytest.mark.megatron
@pytest.mark.skipif(find_spec("megatron") is None, reason="no Megatron-Core here: run bash scripts/test_megatron.sh")
def test_a_checkpoint_the_megatron_build_refuses_is_refused_before_any_rank_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moe_models import MoEConfig, MoEForCausalLM, save_pretrained

    tied = MoEConfig.preset("tiny", vocab_size=24, model_type="deepseek_v3", tie_word_embeddings=True)
    save_pretrained(MoEForCausalLM(tied), tmp_path)
    spec = StepSpec(
        str(tmp_path), PPOConfig(), TrainLoopConfig(), OptimConfig(), max_new_tokens=8, temperature=1.0, seed=0,
        total_steps=1,
    )  # fmt: skip
    from trainers import rank_group

    def no_spawn(method: str) -> None:
        raise AssertionError(f"a rank process was started ({method})")

    monkeypatch.setattr(rank_group.mp, "get_context", no_spawn)
    with pytest.raises(ValueError, match=r"DeepSeek-V3 tie_word_embeddings: expected False, got True"):
        build_steps(MegatronBackendConfig(), spec)
