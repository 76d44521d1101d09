"""FlowConfig: every knob of a FlowGRPO run, as typed sections (standard library and config modules only, so
`--help` is instant). The sections are `trainers.flow.recipe.FlowRecipeConfig`'s (each
component owns its section and consumes it as it is) and Ray's (`async_pipeline.ray_session.config`).

Defaults are the CPU recipe: 8x8 digits, a 600-step flow-matching warm-up with 40% of its labels randomised (so
the base follows its class loosely and leaves RL room), 16 classes x 8 samples per step,
10 sampling steps with an SDE window of 2 steps in the first 5 (noise level 0.7), GRPO with a global std, AdamW at
1e-4, 150 steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from async_pipeline.ray_session.config import RayConfig
from trainers.flow.recipe import FlowRecipeConfig


@dataclass
class FlowConfig(FlowRecipeConfig):
    RUNS_ROOT: ClassVar[Path] = Path("runs") / "flow_grpo"  # where a run without `run.dir` gets its directory

    ray: RayConfig = field(default_factory=RayConfig)
