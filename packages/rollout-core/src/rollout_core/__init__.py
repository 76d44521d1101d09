"""Contracts between engines and trainers, the Engine protocol, and the partial-rollout resume loop. No torch."""

from routing_state import RoutingSpec, RoutingTrace

from rollout_core.agent import ToolFn, run_agent_loop
from rollout_core.builder import RoutingMode, TrajectoryBuilder
from rollout_core.engine import Engine
from rollout_core.params import SamplingParams
from rollout_core.request_checks import check_prompt
from rollout_core.resume import generate_with_resume
from rollout_core.rollout_engine import FolderWriter, PauseMode, RolloutEngine, RolloutSite
from rollout_core.segment import Segment, StopReason, drop_extra_last_row
from rollout_core.trajectory import NOT_SAMPLED, Trajectory, TrajectoryStatus

__all__ = [
    "NOT_SAMPLED",
    "Engine",
    "FolderWriter",
    "PauseMode",
    "RolloutEngine",
    "RolloutSite",
    "RoutingMode",
    "RoutingSpec",
    "RoutingTrace",
    "SamplingParams",
    "Segment",
    "StopReason",
    "ToolFn",
    "Trajectory",
    "TrajectoryBuilder",
    "TrajectoryStatus",
    "check_prompt",
    "drop_extra_last_row",
    "generate_with_resume",
    "run_agent_loop",
]
