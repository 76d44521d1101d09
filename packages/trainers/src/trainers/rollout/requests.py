"""The generation requests of a step: pure functions of (seed, step, prompt position), so both apps, a resumed
run and a prompt that runs again after a fault all draw the same example and sampling seeds.

Request ids are `s<step>-p<position>-r<j>`, group ids `s<step>-p<position>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rl_tasks.example import TaskExample
from rollout_core import SamplingParams

from trainers.rollout.prompts import sample_seed, step_prompts
from trainers.rollout.samples import GenRequest


@dataclass(frozen=True)
class GroupSpec:
    """What every group of a run shares."""

    prompts_per_step: int
    samples_per_prompt: int
    temperature: float
    max_new_tokens: int
    seed: int


def group_requests(train: Sequence[TaskExample], spec: GroupSpec, step: int, position: int) -> list[GenRequest]:
    """The `samples_per_prompt` requests of prompt `position` of `step`."""
    example = step_prompts(train, step, spec.prompts_per_step, spec.seed)[position]
    return _group(example, spec, step, position)


def step_requests(train: Sequence[TaskExample], spec: GroupSpec, step: int) -> list[GenRequest]:
    """Every request of `step`, prompt by prompt."""
    examples = step_prompts(train, step, spec.prompts_per_step, spec.seed)
    return [r for i, ex in enumerate(examples) for r in _group(ex, spec, step, i)]


def _group(example: TaskExample, spec: GroupSpec, step: int, position: int) -> list[GenRequest]:
    out = []
    for j in range(spec.samples_per_prompt):
        params = SamplingParams(
            max_new_tokens=spec.max_new_tokens,
            temperature=spec.temperature,
            seed=sample_seed(spec.seed, step, position, j),
        )
        out.append(GenRequest(f"s{step}-p{position}-r{j}", f"s{step}-p{position}", example, position, j, params))
    return out
