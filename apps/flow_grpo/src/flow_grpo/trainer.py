"""The FlowGRPO loop. One step s:

    take batch s (sampled by weights >= s - 1 - k, k = pipeline.max_staleness)
    -> flow_train_step (advantages, clipped per-step loss, optimiser steps) -> weights s
    -> push weights s to the rollouter, submit batch s + k + 1 (so it is sampled by weights >= s)
    -> validate every k steps (ODE sampler, fixed seeds; image grid) -> metrics line -> checkpoint every k steps
       (the weights and every batch in flight; the loop, start and resume are `run_loop.drive`'s)

With k = 0 this is synchronous: every batch is sampled by the weights the trainer holds. With k >= 1 the
rollouter samples the next batches while the trainer updates. Which weights sample which batch depends only on
the settings (the rollouter runs its calls in order), never on timing.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from flow_models.digits import NUM_CLASSES
from rl_pipeline.staleness import checked_lag
from run_loop import Checkpoint, RunSummary, drive, due
from trainers.backend import BackendState
from trainers.flow.step import flow_train_step

from flow_grpo.batch import RolloutBatch
from flow_grpo.config import FlowConfig
from flow_grpo.pictures import save_grid
from flow_grpo.report import FlowDetails, report
from flow_grpo.setup import FlowSetup, prepare
from flow_grpo.validation import ValidationResult, validate

PENDING = "pending"  # checkpoints/<step>/pending/<s>.npz: batches submitted but not trained at the checkpoint


@dataclass
class FlowGRPO:
    s: FlowSetup
    ready: dict[int, RolloutBatch] = field(default_factory=dict)  # taken (or restored) but not trained yet
    submitted: set[int] = field(default_factory=set)

    @property
    def cfg(self) -> FlowConfig:
        return self.s.cfg

    def push_weights(self) -> None:
        weights, version = self.s.backend.export_weights()
        self.s.rollouts.push(self.s.rollouts.publish(weights, version))

    def submit(self, step: int) -> None:
        if step <= self.cfg.run.steps and step not in self.ready and step not in self.submitted:
            self.s.rollouts.submit(step)
            self.submitted.add(step)

    def take(self, step: int) -> tuple[RolloutBatch, float]:
        if step in self.ready:
            return self.ready.pop(step), 0.0
        self.submitted.discard(step)
        return self.s.rollouts.take(step)

    def validate(self, step: int) -> dict[str, float]:
        s, v = self.s, self.cfg.validation
        shape = (s.model_cfg.channels, s.model_cfg.image_size, s.model_cfg.image_size)
        result = validate(s.backend.model, v, self.cfg.sampler.shift, s.reward, s.classifier, step, shape)
        result.save(s.run.root / "validation")
        if v.grid_per_class and self.cfg.run.plots:
            grid = _grid_images(result, v.grid_per_class)
            title = f"step {step}: val reward {result.metrics['val/reward/mean']:.3f}"
            save_grid(grid, v.grid_per_class, title, s.run.plots / f"samples_{step}.png")
        return result.metrics

    async def start(self, checkpoint: Checkpoint | None) -> None:
        """A fresh run validates the base (step 0); a resumed one restores the checkpoint and its pending batches.
        Either way the rollouter then gets the trainer's weights and the first batches are submitted."""
        s, k = self.s, self.cfg.pipeline.max_staleness
        if checkpoint is None:
            self.s.log.log(0, self.validate(0) | {"reward_model/val_acc": s.classifier_val_acc})
        else:
            s.backend.load_state_dict(BackendState.load(checkpoint.path))
            pending = (RolloutBatch.load(p) for p in sorted((checkpoint.path / PENDING).glob("*.npz")))
            self.ready = {b.step: b for b in pending if b.step <= self.cfg.run.steps}
        self.push_weights()
        done = 0 if checkpoint is None else checkpoint.progress.step
        for step in range(done + 1, done + k + 2):
            self.submit(step)

    async def step(self, step: int, checkpoint: Path | None) -> dict[str, float]:
        metrics = self.run_step(step)
        self.s.log.log(step, metrics)
        return metrics

    def run_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        batch, wait = self.take(step)
        lag = checked_lag(step - 1, batch.version, self.cfg.pipeline.max_staleness)
        t1 = time.perf_counter()
        result = flow_train_step(
            self.s.backend,
            self.cfg.algorithm,
            self.cfg.train,
            batch.rollout(),
            batch.rewards,
            batch.groups,
            sampled_by=batch.version,
            seed=self.cfg.run.seed,
        )
        t2 = time.perf_counter()
        self.push_weights()
        self.submit(step + self.cfg.pipeline.max_staleness + 1)
        t3 = time.perf_counter()
        metrics = result.metrics | _batch_metrics(batch, lag)
        if due(step, self.cfg.validation.every_steps, self.cfg.run.steps):
            metrics |= self.validate(step)
        metrics |= {
            "timing/wait_s": wait,
            "timing/sample_s": batch.sample_s,
            "timing/train_s": t2 - t1,
            "timing/push_s": t3 - t2,
            "timing/validate_s": time.perf_counter() - t3,
        }
        metrics["timing/step_s"] = time.perf_counter() - t0
        metrics["perf/images_per_s"] = len(batch.rewards) / metrics["timing/step_s"]
        return metrics

    async def save(self, step: int, folder: Path) -> int:
        """Takes every batch in flight first: they are saved with the weights (`pending/<step>.npz`), so none is
        lost or re-sampled."""
        for pending in sorted(self.submitted):
            self.ready[pending] = self.s.rollouts.take(pending)[0]
        self.submitted.clear()
        self.s.backend.state_dict().save(folder)
        (folder / PENDING).mkdir()
        for batch in self.ready.values():
            batch.save(folder / PENDING / f"{batch.step}.npz")
        return self.s.backend.version

    async def close(self, completed: bool) -> None:
        self.s.close()


def _grid_images(result: ValidationResult, per_class: int) -> np.ndarray:
    n = len(result.labels) // NUM_CLASSES
    rows = [c * n + j for c in range(NUM_CLASSES) for j in range(per_class)]
    return result.images[rows]


def _batch_metrics(batch: RolloutBatch, lag: int) -> dict[str, float]:
    r = batch.rewards
    return {
        "reward/mean": float(r.mean()),
        "reward/std": float(r.std()),
        "reward/max": float(r.max()),
        "rollout/version_lag": float(lag),
        "rollout/window_start": float(batch.window_start),
        "rollout/images": float(len(r)),
    }


async def run_loop(cfg: FlowConfig, resume: bool) -> RunSummary[FlowDetails]:
    import torch

    torch.set_num_threads(cfg.run.torch_threads)
    s = prepare(cfg, resume=resume)
    return await drive(FlowGRPO(s), s.run, s.log, cfg.run, report(cfg.validation.grid_per_class), resume=resume)


def train(cfg: FlowConfig, *, resume: bool = False) -> RunSummary[FlowDetails]:
    """Runs (or resumes) a whole FlowGRPO run; returns its summary."""
    return asyncio.run(run_loop(cfg, resume))
