"""Groups: what the broker needs of a finished group (`Group`), and the LLM pipeline's group of scored responses
(`FinishedGroup`), as a rollouter hands it to the broker and the trainer reads it.

The requests of prompt `k` are exactly those synchronous training makes for its slot (step `k // P + 1`, position
`k % P`; `trainers.rollout.requests`): same example, same request ids, same sampling seeds. With max_staleness 0 the two
trainers therefore see the same data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rollout_core import NOT_SAMPLED
from trainers.rollout.samples import SampleStatus, ScoredSample


class Group(Protocol):
    """What `Broker` and `PromptLedger` read of a finished group, whatever its samples are (token responses,
    images): the prompt index it answers, the owner id of the rollouter incarnation that made it (a lease released
    after a fault refuses it), and the weight version of its oldest sample (None: nothing was sampled)."""

    @property
    def index(self) -> int: ...

    @property
    def rollouter(self) -> int: ...

    @property
    def min_version(self) -> int | None: ...


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
    def response_lengths(self) -> tuple[int, ...]:
        """Response tokens of each sample (generated ones and any tool observations), in sample order."""
        return tuple(len(s.trajectory.token_versions) for s in self.samples)

    @property
    def num_ok(self) -> int:
        return sum(s.status is SampleStatus.OK for s in self.samples)

    @property
    def generated_tokens(self) -> int:
        """Tokens the engine sampled for the group (tool observations are not generated)."""
        return sum(v != NOT_SAMPLED for s in self.samples for v in s.trajectory.token_versions)


@dataclass(frozen=True)
class ExcludedGroup:
    """A finished group the broker discarded as too stale (`pipeline.staleness_policy rerun`): its prompt runs
    again. Kept for the length-bias metrics: what was generated but not trained."""

    index: int
    min_version: int | None
    response_lengths: tuple[int, ...]

    @classmethod
    def of(cls, group: FinishedGroup) -> ExcludedGroup:
        return cls(group.index, group.min_version, group.response_lengths)
