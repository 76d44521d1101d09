"""The model section at parse time: a component that cannot serve or train the model's family is refused with the
reason, before anything is built; the compiled-decode rule the config applies without torch is the engine's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_adapters.native.decode import decode_step_unsupported
from moe_models import FAMILY_NAMES, MoEConfig
from rl_tasks.model_config import ModelConfig
from rollout_core.native_engine_config import COMPILED_DECODE_FAMILIES, EngineConfig
from rollout_core.server_engine_config import VLLMEngineConfig
from trainers.backend.config import MegatronBackendConfig, VeOmniBackendConfig
from trainers.recipe.config import RecipeConfig, RolloutConfig


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


def test_vllm_serves_every_warm_up_family_but_deepseek_whose_presets_lack_the_cpu_mla_dims() -> None:
    vllm = RolloutConfig(engine=VLLMEngineConfig())
    for family in set(FAMILY_NAMES) - {"deepseek_v3"}:
        RecipeConfig(model=ModelConfig(family=family), rollout=vllm)
    with pytest.raises(ValueError, match=r"rollout\.engine vllm: vLLM's CPU MLA kernel needs"):
        RecipeConfig(model=ModelConfig(family="deepseek_v3"), rollout=vllm)


def test_a_checkpoint_is_judged_by_its_own_config(tmp_path: Path) -> None:
    """A deepseek_v3 checkpoint with the MLA dims vLLM's CPU kernel compiles is served; one without is refused."""
    config = MoEConfig.preset("tiny", vocab_size=8, model_type="deepseek_v3").to_hf_dict()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "config.json").write_text(json.dumps(config))
    vllm = RolloutConfig(engine=VLLMEngineConfig())
    with pytest.raises(ValueError, match="kv_lora_rank"):
        RecipeConfig(model=ModelConfig(path=str(tmp_path)), rollout=vllm)
    (tmp_path / "config.json").write_text(json.dumps({**config, "kv_lora_rank": 512, "qk_rope_head_dim": 64}))
    RecipeConfig(model=ModelConfig(path=str(tmp_path)), rollout=vllm)


def test_the_compiled_decode_families_are_those_the_decode_step_computes() -> None:
    served = {
        f for f in FAMILY_NAMES if not decode_step_unsupported(MoEConfig.preset("tiny", vocab_size=8, model_type=f))
    }
    assert served == set(COMPILED_DECODE_FAMILIES)


def test_megatron_trains_the_deepseek_v3_warm_up_model() -> None:
    cfg = RecipeConfig(model=ModelConfig(family="deepseek_v3"), backend=MegatronBackendConfig())
    assert cfg.model.resolved_family() == "deepseek_v3"
