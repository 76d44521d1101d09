"""FlowSetup: what a run prepares before it trains: its directory (claimed, locked), the cached base model and
reward classifier (`trainers.flow.base`), the backend, the rewards, and the rollouter with its batches in flight
(`async_pipeline.flow_inflight`: in this process or on a Ray actor)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from async_pipeline.flow_inflight import InFlight
from async_pipeline.flow_rollouter import FlowRollouterSpec
from flow_models.rewards import RewardFn
from run_lifecycle import MetricsLog, RunDir, RunLock
from run_lifecycle.claim import claim_run_dir
from trainers.flow.backend import FlowBackend
from trainers.flow.base import FlowBase

from flow_grpo.cli import DEFAULT_RUNS_ROOT
from flow_grpo.config import FlowConfig


@dataclass
class FlowSetup:
    cfg: FlowConfig
    run: RunDir
    lock: RunLock  # held until `close`
    log: MetricsLog
    base: FlowBase
    backend: FlowBackend
    inflight: InFlight
    reward: RewardFn

    def close(self) -> None:
        try:
            self.inflight.close()
        finally:
            self.lock.release()


def prepare(cfg: FlowConfig, *, resume: bool) -> FlowSetup:
    run, lock = claim_run_dir(cfg, resume=resume, runs_root=DEFAULT_RUNS_ROOT)  # type: ignore[arg-type]
    try:
        base = FlowBase.prepare(cfg.model, cfg.warmup, cfg.reward, Path(cfg.run.warmup_cache).resolve())
        total = cfg.run.steps * cfg.train.mini_batches_per_step * cfg.train.epochs
        backend = FlowBackend(
            base.model, cfg.optim, cfg.sampler, with_reference=cfg.algorithm.beta > 0, total_steps=total
        )
        threads = cfg.ray.rollouter_threads if cfg.pipeline.ray else cfg.run.torch_threads
        rollout = cfg.rollout
        spec = FlowRollouterSpec(
            base.model_cfg,
            base.weights(),
            cfg.sampler,
            rollout.prompts_per_step,
            rollout.samples_per_prompt,
            base.reward,
            cfg.run.seed,
            threads,
        )
        inflight = InFlight.open(spec, cfg.run.steps, cfg.ray if cfg.pipeline.ray else None)
    except BaseException:
        lock.release()
        raise
    return FlowSetup(cfg, run, lock, MetricsLog(run.metrics), base, backend, inflight, base.reward.build())
