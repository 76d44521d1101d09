"""AsyncConfig: every knob of an async PPO run (no torch or ray imported here, so `--help` is instant).

The shared sections (run, task, warmup, rollout, algorithm, train, optim, backend, validation) are every trainer
app's (`trainers.recipe.config.RecipeConfig`), so a config that runs one trainer runs the other; this app adds pipeline
and faults (`async_pipeline.config`: the async machinery's sections) and ray. Defaults: one rollouter and one trainer
on their own core each, max_staleness 1 (the rollouter generates step s + 1 while the trainer trains step s),
weights pushed after every update with pause `keep` (in-flight responses continue under the new weights, each token
tagged with its version).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from trainers.recipe.config import RecipeConfig

from async_pipeline.config import FaultConfig, PipelineConfig
from async_pipeline.ray_session.config import RayConfig


@dataclass
class AsyncConfig(RecipeConfig):
    RUNS_ROOT: ClassVar[Path] = Path("runs") / "async_ppo"  # where a run without `run.dir` gets its directory

    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.debug.precision_steps:
            raise ValueError(
                "debug.precision_steps: the precision probe runs in apps/sync_ppo, where the engine's "
                "model is in the trainer's process; here the engines are in rollouter actors"
            )
