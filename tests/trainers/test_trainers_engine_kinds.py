"""Every kind of every section that names an engine (`rollout.engine`, `teacher.engine`) has its engine registered
by the installed packages, and the warm-up's greedy evaluator is there: what `build()` opens is the engine
package's own object."""

from __future__ import annotations

import typing

from rollout_core.engine_registry import GREEDY_EVALUATORS, ROLLOUT_ENGINES, TEACHER_ENGINES, registered
from rollout_core.teacher_engine import TeacherEngineConfig
from trainers.rollout.engine_config import RolloutEngineConfig


def kinds(union: object) -> list[str]:
    return [typing.get_args(typing.get_type_hints(member)["kind"])[0] for member in typing.get_args(union)]


def test_every_rollout_and_teacher_engine_kind_is_registered_by_an_installed_package() -> None:
    from engine_adapters.native.rollout_engine import open_native_engine
    from engine_adapters.native.teacher_engine import NativeTeacherEngine
    from engine_adapters.sglang.rollout_engine import open_sglang_engine
    from engine_adapters.vllm.rollout_engine import VLLMRolloutEngine
    from engine_adapters.vllm.teacher_engine import VLLMTeacherEngine

    assert kinds(RolloutEngineConfig) == ["native", "vllm", "sglang"]
    assert [registered(ROLLOUT_ENGINES, k) for k in kinds(RolloutEngineConfig)] == [
        open_native_engine,
        VLLMRolloutEngine.launch,
        open_sglang_engine,
    ]
    assert kinds(TeacherEngineConfig) == ["native", "vllm"]
    assert registered(TEACHER_ENGINES, "native") is NativeTeacherEngine
    assert registered(TEACHER_ENGINES, "vllm") == VLLMTeacherEngine.launch


def test_the_warmups_greedy_evaluator_is_the_native_engines() -> None:
    from engine_adapters.native.greedy_eval import evaluate_greedy

    assert registered(GREEDY_EVALUATORS, "native") is evaluate_greedy
