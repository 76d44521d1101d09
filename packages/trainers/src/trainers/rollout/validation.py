"""Validation: greedy and/or n sampled responses per validation prompt, scored and named by trainers' metrics.

Never scored by a teacher, never trained on: validation responses only measure the policy of one step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rl_tasks.reward import RewardFn
from rollout_core import Engine, SamplingParams

from trainers import ValSample
from trainers.dumps import DumpRecord
from trainers.rollout.dumps import dump_record
from trainers.rollout.prompts import sample_seed
from trainers.rollout.rollout import REWARD_TIMEOUT_S, ToolEnv, generate_all, score_all
from trainers.rollout.samples import GenRequest, SampleStatus, ScoredSample
from trainers.rollout.validation_config import ValidationConfig
from trainers.validation_metrics import validation_metrics

GREEDY = "greedy"


@dataclass
class ValidationResult:
    """`metrics`: `val-core/...`, `val-aux/...`, `val/greedy_acc` (mean acc over every greedy prompt that
    scored) and error counts; `records`: one dump record per response."""

    metrics: dict[str, float]
    records: list[DumpRecord]


def _requests(
    examples: Sequence[TaskExample], cfg: ValidationConfig, step: int, seed: int, max_new_tokens: int
) -> list[GenRequest]:
    out = []
    for i, ex in enumerate(examples):
        if cfg.greedy:
            params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, return_routed_experts=False)
            out.append(GenRequest(f"val{step}-p{i}-{GREEDY}", f"{ex.uid}-{GREEDY}", ex, i, 0, params))
        for j in range(cfg.samples_per_prompt):
            params = SamplingParams(
                max_new_tokens=max_new_tokens,
                temperature=cfg.temperature,
                return_routed_experts=False,
                seed=sample_seed(seed, step, i, j, stream=1),
            )
            out.append(GenRequest(f"val{step}-p{i}-r{j}", ex.uid, ex, i, j, params))
    return out


def _metrics(scored: Sequence[ScoredSample], n: int) -> dict[str, float]:
    """validation_metrics over the uids whose n responses all scored (equal n per uid is required)."""
    by_uid: dict[str, list[ScoredSample]] = {}
    for s in scored:
        by_uid.setdefault(s.request.example.uid, []).append(s)
    samples = [
        ValSample(
            s.request.example.data_source,
            uid,
            s.request.sample_index,
            s.reward,
            s.acc,
            s.pred,
            num_turns=max(s.trajectory.num_turns, 1),
        )
        for uid, group in by_uid.items()
        if len(group) == n and all(s.status is SampleStatus.OK for s in group)
        for s in group
    ]
    return validation_metrics(samples) if samples else {}


async def validate(
    engine: Engine,
    renderer: Renderer,
    reward_fn: RewardFn,
    examples: Sequence[TaskExample],
    cfg: ValidationConfig,
    *,
    step: int,
    seed: int,
    max_new_tokens: int,
    tool: ToolEnv | None = None,
    reward_timeout_s: float = REWARD_TIMEOUT_S,
) -> ValidationResult:
    """Runs every validation response through the engine now serving the policy of `step`."""
    requests = _requests(examples, cfg, step, seed, max_new_tokens)
    trajectories = await generate_all(engine, renderer, requests, tool=tool)
    scored = score_all(renderer, reward_fn, requests, trajectories, timeout_s=reward_timeout_s)
    greedy = [s for s in scored if s.request.params.temperature == 0.0]
    sampled = [s for s in scored if s.request.params.temperature > 0.0]
    metrics: dict[str, float] = {}
    if greedy:
        metrics |= _metrics(greedy, 1)
        ok = [s.acc for s in greedy if s.status is SampleStatus.OK]
        if ok:
            metrics["val/greedy_acc"] = sum(ok) / len(ok)
    if sampled:
        metrics |= _metrics(sampled, cfg.samples_per_prompt)
    metrics["val/num_errors"] = float(sum(s.status is not SampleStatus.OK for s in scored))
    records = [dump_record(s, step=step) for s in scored]
    return ValidationResult(metrics, records)
