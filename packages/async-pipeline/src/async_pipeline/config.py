"""The async machinery's own config sections: `pipeline` (the staleness bound and its policy, weight pushes, partial
rollout) and `faults` (injected faults for the recovery paths' tests). Standard library only, so an app's `--help`
parses them without torch or ray."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from run_lifecycle.fields import help_field


@dataclass
class PipelineConfig:
    max_staleness: int = help_field(
        "max age in weight versions of the oldest token of a trained sample (0: synchronous training)", 1
    )
    staleness_policy: Literal["correct", "rerun"] = help_field(
        "a finished group with tokens older than max_staleness versions: `correct` trains it, each token beyond the "
        "bound with the truncated behaviour weight min(pi_prox / mu, stale_is_cap) and its trust region at pi_prox "
        "(docs/algorithms.md); `rerun` discards it and runs the prompt again (long responses are excluded most)",
        "correct",
    )
    stale_is_cap: float = help_field("staleness_policy correct: truncation of a stale token's weight pi_prox / mu", 2.0)
    sync_every: int = help_field("push weights to the rollouters after every k trainer steps", 1)
    pause_mode: Literal["keep", "abort"] = help_field(
        "weight push: `keep` freezes in-flight responses and continues them under the new weights; `abort` "
        "ends their engine calls and resumes them with prompt + tokens so far (partial rollout)",
        "keep",
    )
    partial_rollout: bool = help_field(
        "with pause_mode abort: resume aborted responses (false: drop them, counted)", True
    )
    bucket_mb: float = help_field("weights travel trainer -> engines in buckets of at most this many MiB", 256.0)

    def __post_init__(self) -> None:
        if self.max_staleness < 0 or self.sync_every < 1:
            raise ValueError(
                f"pipeline: expected max_staleness >= 0 and sync_every >= 1, got {self.max_staleness}, "
                f"{self.sync_every}"
            )
        if not self.stale_is_cap > 0:
            raise ValueError(f"pipeline.stale_is_cap: expected > 0, got {self.stale_is_cap}")
        if not self.bucket_mb > 0:
            raise ValueError(f"pipeline.bucket_mb: expected > 0, got {self.bucket_mb}")
        if self.sync_every > self.max_staleness + 1:
            raise ValueError(
                f"pipeline: sync_every {self.sync_every} > max_staleness + 1 = {self.max_staleness + 1}: every sample "
                "generated between pushes would be too stale to train on; raise max_staleness or push more often"
            )


@dataclass
class FaultConfig:
    """Injected faults, for tests of the recovery paths."""

    rollouter_crash_after_groups: int = help_field(
        "rollouter 0's first incarnation exits (os._exit) when it has finished this many groups, before delivering "
        "the last one (0: never)",
        0,
    )
    push_error_at_version: int = help_field("rollouter 0 raises when asked to load this weight version (0: never)", 0)
    teacher_crash_after_calls: int = help_field(
        "distillation: teacher replica 0's first incarnation exits (os._exit) on this scoring call (0: never)", 0
    )
