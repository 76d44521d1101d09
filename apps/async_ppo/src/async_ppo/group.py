"""One prompt's GRPO group: the requests a ticket expands to, and the finished group sent to the trainer.

The requests of prompt `k` are exactly those synchronous training makes for its slot (step `k // P + 1`,
position `k % P`): same example, same request ids, same sampling seeds. With max_staleness 0 the two trainers
therefore see the same data.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_tasks.example import TaskExample
from rollout_core import SamplingParams
from sync_ppo.prompts import sample_seed, step_prompts
from sync_ppo.rollout import GenRequest, SampleStatus, ScoredSample

from async_ppo.ledger import PromptTicket


@dataclass(frozen=True)
class GroupSpec:
    """What every group of a run shares."""

    prompts_per_step: int
    samples_per_prompt: int
    temperature: float
    max_new_tokens: int
    seed: int


def group_requests(ticket: PromptTicket, train: tuple[TaskExample, ...], spec: GroupSpec) -> list[GenRequest]:
    step, i = ticket.slot(spec.prompts_per_step)
    example = step_prompts(train, step, spec.prompts_per_step, spec.seed)[i]
    out = []
    for j in range(spec.samples_per_prompt):
        params = SamplingParams(max_new_tokens=spec.max_new_tokens, temperature=spec.temperature,
                                seed=sample_seed(spec.seed, step, i, j))  # fmt: skip
        out.append(GenRequest(f"s{step}-p{i}-r{j}", f"s{step}-p{i}", example, i, j, params))
    return out


@dataclass(frozen=True)
class FinishedGroup:
    """All `samples_per_prompt` responses of one prompt (every status: dropped ones are counted by the trainer).

    `generate_s` is the wall time from the group's submission to its last response; `rollouter` is the owner id
    of the rollouter incarnation that made it.
    """

    index: int
    samples: tuple[ScoredSample, ...]
    rollouter: int
    generate_s: float

    @property
    def min_version(self) -> int | None:
        """The weight version of the group's oldest generated token (None when no response has a token)."""
        versions = [v for s in self.samples if (v := s.trajectory.min_version) is not None]
        return min(versions) if versions else None

    @property
    def num_ok(self) -> int:
        return sum(s.status is SampleStatus.OK for s in self.samples)

    @property
    def generated_tokens(self) -> int:
        return sum(len(s.trajectory.response_ids) for s in self.samples)
