"""The model section at parse time: a component that cannot serve or train the model's family is refused with the
reason, before anything is built; the compiled-decode rule the config applies without torch is the engine's own."""

from __future__ import annotations

import pytest
from engine_adapters.engine_config import VLLM_FAMILIES, VLLMEngineConfig
from moe_models import FAMILY_NAMES, MoEConfig
from native_engine.config import COMPILED_DECODE_FAMILIES, EngineConfig
from native_engine.decode import decode_step_unsupported
from rl_run.config import RecipeConfig, RolloutConfig
from rl_tasks.model_config import ModelConfig
from trainers.backend.config import MegatronBackendConfig, VeOmniBackendConfig


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_every_family_runs_on_the_default_components(family: str) -> None:
    assert RecipeConfig(model=ModelConfig(family=family)).model.resolved_family() == family


@pytest.mark.parametrize(
    ("family", "changes", "reason"),
    [
        ("deepseek_v3", {"backend": VeOmniBackendConfig()}, "backend.kind veomni builds and maps"),
        ("gpt_oss", {"backend": MegatronBackendConfig()}, "backend.kind megatron builds and maps"),
        ("gpt_oss", {"rollout": RolloutConfig(engine=EngineConfig(compile_decode=True))}, "compile_decode"),
        ("deepseek_v3", {"rollout": RolloutConfig(engine=EngineConfig(compile_decode=True))}, "compile_decode"),
    ],
)
def test_a_component_that_cannot_serve_the_family_is_refused_with_the_reason(
    family: str, changes: dict, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason) as refused:
        RecipeConfig(model=ModelConfig(family=family), **changes)
    assert family in str(refused.value)


def test_vllm_is_refused_for_the_families_it_does_not_serve() -> None:
    for family in set(FAMILY_NAMES) - set(VLLM_FAMILIES):
        with pytest.raises(ValueError, match=r"rollout\.engine vllm"):
            RecipeConfig(model=ModelConfig(family=family), rollout=RolloutConfig(engine=VLLMEngineConfig()))


def test_the_compiled_decode_families_are_those_the_decode_step_computes() -> None:
    served = {
        f for f in FAMILY_NAMES if not decode_step_unsupported(MoEConfig.preset("tiny", vocab_size=8, model_type=f))
    }
    assert served == set(COMPILED_DECODE_FAMILIES)


def test_megatron_trains_the_deepseek_v3_warm_up_model() -> None:
    cfg = RecipeConfig(model=ModelConfig(family="deepseek_v3"), backend=MegatronBackendConfig())
    assert cfg.model.resolved_family() == "deepseek_v3"
