"""The FlowGRPO loop. One step s:

    take batch s (sampled by weights >= s - 1 - k, k = pipeline.max_staleness)
    -> flow_train_step (advantages, clipped per-step loss, optimiser steps) -> weights s
    -> push weights s to the rollouter, submit batch s + k + 1 (so it is sampled by weights >= s)
    -> validate every k steps (ODE sampler, fixed seeds; image grid) -> metrics line -> checkpoint every k steps

With k = 0 this is synchronous: every batch is sampled by the weights the trainer holds. With k >= 1 the
rollouter samples the next batches while the trainer updates. Which weights sample which batch depends only on
the settings (the rollouter runs its calls in order), never on timing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from flow_models.digits import NUM_CLASSES
from rl_pipeline.staleness import checked_lag
from run_logging import Progress
from trainers.flow.step import flow_train_step

from flow_grpo.batch import RolloutBatch
from flow_grpo.checkpoint import FlowProgress, load_checkpoint, save_checkpoint
from flow_grpo.config import FlowConfig
from flow_grpo.pictures import save_grid
from flow_grpo.setup import FlowSetup, prepare
from flow_grpo.summary import FlowSummary, summarize, write_plots
from flow_grpo.validation import ValidationResult, validate

PROGRESS_FIELDS = {"reward": "reward/mean", "val": "val/reward/mean", "img/s": "perf/images_per_s"}


@dataclass
class FlowGRPO:
    s: FlowSetup
    ready: dict[int, RolloutBatch] = field(default_factory=dict)  # taken (or restored) but not trained yet
    submitted: set[int] = field(default_factory=set)

    @property
    def cfg(self) -> FlowConfig:
        return self.s.cfg

    def due(self, step: int, every: int) -> bool:
        return (every > 0 and step % every == 0) or step == self.cfg.run.steps

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

    def step(self, step: int) -> dict[str, float]:
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
        if self.due(step, self.cfg.validation.every_steps):
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

    def checkpoint(self, progress: FlowProgress) -> None:
        """Takes every batch in flight first: they are saved with the weights (none is lost or re-sampled)."""
        for step in sorted(self.submitted):
            self.ready[step] = self.s.rollouts.take(step)[0]
        self.submitted.clear()
        save_checkpoint(
            self.s.run,
            self.s.backend.state_dict(),
            progress,
            list(self.ready.values()),
            keep=self.cfg.run.keep_checkpoints,
        )


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


def _start(loop: FlowGRPO, resume: bool) -> FlowProgress:
    """A fresh run validates the base (step 0); a resumed one restores the latest checkpoint and its pending
    batches. Either way the rollouter then gets the trainer's weights and the first batches are submitted."""
    s, k = loop.s, loop.cfg.pipeline.max_staleness
    if not resume:
        metrics = loop.validate(0)
        s.log.log(0, metrics | {"reward_model/val_acc": s.classifier_val_acc})
        progress = FlowProgress(0, loop.cfg.run.seed, metrics["val/reward/mean"], 0.0)
    else:
        path = s.run.latest_checkpoint()
        if path is None:
            raise ValueError(f"--resume: expected a complete checkpoint under {s.run.checkpoints}, got none")
        state, progress, pending = load_checkpoint(path)
        s.backend.load_state_dict(state)
        loop.ready = {b.step: b for b in pending if b.step <= loop.cfg.run.steps}
        s.log.truncate_after(progress.step)
    loop.push_weights()
    for step in range(progress.step + 1, progress.step + k + 2):
        loop.submit(step)
    return progress


def run_loop(cfg: FlowConfig, resume: bool) -> FlowSummary:
    import torch

    torch.set_num_threads(cfg.run.torch_threads)
    s = prepare(cfg, resume=resume)
    loop = FlowGRPO(s)
    t0 = time.perf_counter()
    try:
        progress = _start(loop, resume)
        elapsed0 = progress.elapsed_s
        bar = Progress(cfg.run.steps, PROGRESS_FIELDS, initial=progress.step, disable=not cfg.run.progress)
        try:
            for step in range(progress.step + 1, cfg.run.steps + 1):
                metrics = loop.step(step)
                s.log.log(step, metrics)
                bar.update(step, metrics)
                progress = FlowProgress(
                    step, cfg.run.seed, progress.base_val_reward, elapsed0 + time.perf_counter() - t0
                )
                if loop.due(step, cfg.run.checkpoint_every):
                    loop.checkpoint(progress)
        finally:
            bar.close()
        wall = elapsed0 + time.perf_counter() - t0  # validation of step 0 and the steps (not start-up or shutdown)
    finally:
        s.close()
    if cfg.run.plots:
        write_plots(s.run, cfg.validation.grid_per_class)
    return summarize(s.run, seed=cfg.run.seed, wall_s=wall, base_val_reward=progress.base_val_reward)


def train(cfg: FlowConfig, *, resume: bool = False) -> FlowSummary:
    """Runs (or resumes) a whole FlowGRPO run; returns its summary."""
    return run_loop(cfg, resume)
