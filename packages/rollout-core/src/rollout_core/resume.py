"""The partial-rollout resume loop: one uninterrupted generation out of engine calls that weight updates abort."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rollout_core.builder import RoutingMode, TrajectoryBuilder
from rollout_core.engine import Engine
from rollout_core.params import SamplingParams
from rollout_core.segment import StopReason
from rollout_core.trajectory import Trajectory, TrajectoryStatus

RESUME_SEED_STRIDE = 1_000_003  # the k-th resumed call samples with seed + k * stride (fresh randomness)


@dataclass
class TurnResult:
    stop_reason: StopReason
    status: TrajectoryStatus  # OK when the turn finished with stop/length


async def call_engine(engine: Engine, request_id: str, prompt_ids: list[int], params: SamplingParams):
    """`engine.generate`, but a cancelled caller aborts the engine's request before the cancellation goes on."""
    try:
        return await engine.generate(request_id, prompt_ids, params)
    except asyncio.CancelledError:
        await asyncio.shield(engine.abort(request_id))
        raise


async def run_turn(
    engine: Engine,
    builder: TrajectoryBuilder,
    request_id: str,
    params: SamplingParams,
    *,
    partial_rollout: bool,
    max_resumes: int,
) -> TurnResult:
    """Generates up to `params.max_new_tokens` tokens for one turn, resuming after aborts.

    Each resumed call re-submits the whole context (prompt + everything so far) with the remaining budget,
    so the turn never exceeds `max_new_tokens`. A call that produced no token still counts as a resume.
    """
    traj = builder.traj
    produced = 0
    while True:
        remaining = params.max_new_tokens - produced
        if remaining <= 0:
            return TurnResult(StopReason.LENGTH, TrajectoryStatus.OK)
        context = builder.context
        seed = params.seed
        if seed is not None and traj.num_resumes:
            seed = seed + traj.num_resumes * RESUME_SEED_STRIDE
        call = params.replace(max_new_tokens=remaining, seed=seed, routed_experts_start=builder.routing_start())
        seg = await call_engine(engine, request_id, context, call)
        builder.add_segment(seg, len(context), remaining)
        produced += len(seg.token_ids)
        if seg.stop_reason != StopReason.ABORT:
            return TurnResult(seg.stop_reason, TrajectoryStatus.OK)
        if produced >= params.max_new_tokens:
            return TurnResult(StopReason.LENGTH, TrajectoryStatus.OK)
        if not partial_rollout:
            return TurnResult(StopReason.ABORT, TrajectoryStatus.ABORTED)
        if traj.num_resumes >= max_resumes:
            return TurnResult(StopReason.ABORT, TrajectoryStatus.TRUNCATED)
        traj.num_resumes += 1


async def generate_with_resume(
    engine: Engine,
    request_id: str,
    prompt_ids: list[int],
    params: SamplingParams,
    *,
    partial_rollout: bool = True,
    max_resumes: int = 16,
    routing: RoutingMode = "per_position",
) -> Trajectory:
    """Generates one response, resuming with prompt + tokens so far whenever a call is aborted.

    - tokens, log-probs and per-token versions are concatenated across calls; `num_preempted` is summed;
    - routing rows follow `routing`: `per_position` (append-only by position: the routing rule) or `latest`
      (each call replaces the rows from its start: verl#6029, for comparison);
    - `partial_rollout=False`: an aborted call ends the trajectory as `aborted` (never a training sample);
    - more than `max_resumes` aborted calls end it as `truncated`;
    - cancelling the caller aborts the engine's request and re-raises `CancelledError`.
    An engine error propagates unchanged (the caller decides whether it marks the sample `error`).
    """
    if not prompt_ids:
        raise ValueError("prompt_ids: expected at least one token, got an empty prompt")
    if max_resumes < 0:
        raise ValueError(f"max_resumes: expected >= 0, got {max_resumes}")
    builder = TrajectoryBuilder(prompt_ids, engine.routing_spec if params.return_routed_experts else None, routing)
    turn = await run_turn(engine, builder, request_id, params, partial_rollout=partial_rollout, max_resumes=max_resumes)
    builder.traj.num_turns = 1
    return builder.finish(turn.stop_reason, turn.status)
