"""Multi-turn agent loop: generation turns separated by tool/environment tokens."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from rollout_core.builder import RoutingMode, TrajectoryBuilder
from rollout_core.engine import Engine
from rollout_core.params import SamplingParams
from rollout_core.resume import run_turn
from rollout_core.segment import StopReason
from rollout_core.trajectory import Trajectory, TrajectoryStatus

# Called after each finished turn with the whole context (prompt + response so far). Returns the tokens the
# environment appends (tool output, observation, next user message), or None to end the episode.
ToolFn = Callable[[list[int]], "list[int] | Awaitable[list[int] | None] | None"]


async def run_agent_loop(
    engine: Engine,
    request_id: str,
    prompt_ids: list[int],
    params: SamplingParams,
    tool_fn: ToolFn,
    *,
    max_turns: int = 4,
    partial_rollout: bool = True,
    max_resumes: int = 16,
    routing: RoutingMode = "per_position",
) -> Trajectory:
    """Runs up to `max_turns` generation turns; `params.max_new_tokens` is each turn's budget.

    Tool tokens are appended with `loss_mask` 0. Their routing rows come from the next turn's prefill by the
    same append-only rule, so earlier turns keep the rows (and versions) of the passes that generated them
    (the multi-turn overwrite of verl#6054 cannot happen). A tool function that raises ends the trajectory as
    `error` with the message.
    """
    if not prompt_ids:
        raise ValueError("prompt_ids: expected at least one token, got an empty prompt")
    if max_turns < 1:
        raise ValueError(f"max_turns: expected >= 1, got {max_turns}")
    builder = TrajectoryBuilder(prompt_ids, engine.routing_spec if params.return_routed_experts else None, routing)
    traj = builder.traj
    reason = StopReason.LENGTH
    for turn_index in range(max_turns):
        turn = await run_turn(
            engine, builder, request_id, params, partial_rollout=partial_rollout, max_resumes=max_resumes
        )
        traj.num_turns = turn_index + 1
        reason = turn.stop_reason
        if turn.status != TrajectoryStatus.OK:
            return builder.finish(reason, turn.status)
        if turn_index == max_turns - 1:
            break
        try:
            out = tool_fn(builder.context)
            if inspect.isawaitable(out):
                out = await out
        except Exception as exc:  # the environment is user code: its failure is the sample's error
            return builder.finish(reason, TrajectoryStatus.ERROR, error=f"tool_fn raised {exc!r}")
        if out is None:
            break
        builder.add_tool_tokens(list(out))
    return builder.finish(reason, TrajectoryStatus.OK)
