"""The FlowGRPO app's assembly: what a run prepares before it trains (`trainers.flow.run.FlowRun`: its directory,
claimed and locked, the cached base model and reward classifier, the backend, the rewards, and the rollouter with
its batches in flight, `async_pipeline.flow_inflight`: in this process or on a Ray actor), and `train`, which runs
`trainers.flow.trainer`'s loop over it."""

from __future__ import annotations

from pathlib import Path

from async_pipeline.flow_inflight import InFlight
from async_pipeline.flow_rollouter import FlowRollouterSpec
from run_lifecycle import MetricsLog, RunSummary
from run_lifecycle.claim import claim_run_dir
from trainers.flow import trainer as flow_trainer
from trainers.flow.backend import FlowBackend
from trainers.flow.base import FlowBase
from trainers.flow.report import FlowDetails
from trainers.flow.run import FlowRun

from flow_grpo.config import FlowConfig


def prepare(cfg: FlowConfig, *, resume: bool) -> FlowRun:
    run, lock = claim_run_dir(cfg, resume=resume, runs_root=cfg.RUNS_ROOT)  # type: ignore[arg-type]
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
    return FlowRun(cfg, run, lock, MetricsLog(run.metrics), base, backend, inflight, base.reward.build())


def train(cfg: FlowConfig, *, resume: bool = False) -> RunSummary[FlowDetails]:
    """Runs (or resumes) a whole FlowGRPO run; returns its summary."""
    return flow_trainer.train(cfg, lambda: prepare(cfg, resume=resume), resume=resume)
