"""The FlowGRPO loop. One step s:

    take batch s (sampled by weights >= s - 1 - k, k = pipeline.max_staleness)
    -> flow_train_step (advantages, clipped per-step loss, optimiser steps) -> weights s
    -> push weights s to the rollouter, submit batch s + k + 1 (so it is sampled by weights >= s)
    -> validate every k steps (ODE sampler, fixed seeds; image grid) -> metrics line -> checkpoint every k steps
       (the weights and every batch in flight, `async_pipeline.flow_inflight`; the loop, start and resume are
       `run_lifecycle.drive`'s)

With k = 0 this is synchronous: every batch is sampled by the weights the trainer holds. With k >= 1 the
rollouter samples the next batches while the trainer updates. Which weights sample which batch depends only on
the settings (the rollouter runs its calls in order), never on timing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from run_lifecycle import Checkpoint, RunSummary, drive, due

from trainers.backend import BackendState
from trainers.flow.pictures import save_samples
from trainers.flow.recipe import FlowRecipeConfig
from trainers.flow.report import FlowDetails, report
from trainers.flow.run import FlowRun
from trainers.flow.step import flow_train_step
from trainers.flow.validation import validate
from trainers.staleness import checked_lag


@dataclass
class FlowGRPO:
    s: FlowRun

    @property
    def cfg(self) -> FlowRecipeConfig:
        return self.s.cfg

    def validate(self, step: int) -> dict[str, float]:
        s, v = self.s, self.cfg.validation
        shape = (s.base.model_cfg.channels, s.base.model_cfg.image_size, s.base.model_cfg.image_size)
        result = validate(s.backend.model, v, self.cfg.sampler.shift, s.reward, s.base.classifier, step, shape)
        result.save(s.run.root / "validation")
        if v.grid_per_class and self.cfg.run.plots:
            save_samples(result, v.grid_per_class, s.run.plots / f"samples_{step}.png")
        return result.metrics

    async def start(self, checkpoint: Checkpoint | None) -> None:
        """A fresh run validates the base (step 0); a resumed one restores the checkpoint and its pending batches.
        Either way the rollouter then gets the trainer's weights and the first batches are submitted."""
        s, k = self.s, self.cfg.pipeline.max_staleness
        if checkpoint is None:
            s.log.log(0, self.validate(0) | {"reward_model/val_acc": s.base.classifier_val_acc})
        else:
            s.backend.load_state_dict(BackendState.load(checkpoint.path))
            s.inflight.restore(checkpoint.path)
        s.inflight.push_weights(*s.backend.export_weights())
        done = 0 if checkpoint is None else checkpoint.progress.step
        for step in range(done + 1, done + k + 2):
            s.inflight.submit(step)

    async def step(self, step: int, checkpoint: Path | None) -> dict[str, float]:
        s, cfg, t0 = self.s, self.cfg, time.perf_counter()
        batch, wait = s.inflight.take(step)
        lag = checked_lag(step - 1, batch.version, cfg.pipeline.max_staleness)
        t1 = time.perf_counter()
        result = flow_train_step(
            s.backend,
            cfg.algorithm,
            cfg.train,
            batch.rollout(),
            batch.rewards,
            batch.groups,
            sampled_by=batch.version,
            seed=cfg.run.seed,
        )
        t2 = time.perf_counter()
        s.inflight.push_weights(*s.backend.export_weights())
        s.inflight.submit(step + cfg.pipeline.max_staleness + 1)
        t3 = time.perf_counter()
        metrics = result.metrics | batch.metrics(lag)
        if due(step, cfg.validation.every_steps, cfg.run.steps):
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
        s.log.log(step, metrics)
        return metrics

    async def save(self, step: int, folder: Path) -> int:
        """The batches in flight are saved with the weights, so none is lost or re-sampled."""
        self.s.inflight.save(folder)
        self.s.backend.state_dict().save(folder)
        return self.s.backend.version

    async def close(self, completed: bool) -> None:
        self.s.close()


async def run_loop(cfg: FlowRecipeConfig, prepare: Callable[[], FlowRun], resume: bool) -> RunSummary[FlowDetails]:
    import torch

    torch.set_num_threads(cfg.run.torch_threads)
    s = prepare()
    return await drive(FlowGRPO(s), s.run, s.log, cfg.run, report(cfg.validation.grid_per_class), resume=resume)


def train(cfg: FlowRecipeConfig, prepare: Callable[[], FlowRun], *, resume: bool = False) -> RunSummary[FlowDetails]:
    """Runs (or resumes) a whole FlowGRPO run; returns its summary. `prepare`: what the run trains with (its
    directory, base, backend and batches in flight), called once torch's threads are set."""
    return asyncio.run(run_loop(cfg, prepare, resume))
