"""FlowRun: what a FlowGRPO run trains with, prepared by its app: the run directory (claimed and locked), the metrics
log, the cached base model and reward classifier (`trainers.flow.base`), the backend, the reward, and the batches in
flight (`FlowRollouts`: `async_pipeline.flow_inflight.InFlight` samples them in this process or on a Ray actor)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from flow_models.rewards import RewardFn
from run_lifecycle import MetricsLog, RunDir, RunLock

from trainers.flow.backend import FlowBackend
from trainers.flow.base import FlowBase
from trainers.flow.batch import RolloutBatch
from trainers.flow.recipe import FlowRecipeConfig


class FlowRollouts(Protocol):
    """The batches in flight: batch s is submitted once and taken once, sampled by the weights pushed last before
    its submission; they survive a checkpoint (`save`, `restore`)."""

    def push_weights(self, weights: dict[str, object], version: int) -> None: ...

    def submit(self, step: int) -> None: ...

    def take(self, step: int) -> tuple[RolloutBatch, float]:
        """Batch `step` and the seconds spent waiting for it."""
        ...

    def save(self, folder: Path) -> None: ...

    def restore(self, folder: Path) -> None: ...

    def close(self) -> None: ...


@dataclass
class FlowRun:
    cfg: FlowRecipeConfig
    run: RunDir
    lock: RunLock  # held until `close`
    log: MetricsLog
    base: FlowBase
    backend: FlowBackend
    inflight: FlowRollouts
    reward: RewardFn

    def close(self) -> None:
        try:
            self.inflight.close()
        finally:
            self.lock.release()
