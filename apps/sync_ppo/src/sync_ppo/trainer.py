"""The synchronous PPO/GRPO loop. One step:

    generate (rollout engine, samples_per_prompt per prompt, all at once; with distillation a teacher scores each
    group as it finishes) -> reward (errors counted, excluded)
    -> policy trainer: drop non-ok samples, pad, advantages, update (algorithm on backend), rollout dump
    -> push weights (pause, update_weights(version + 1), resume) -> validate every k steps -> metrics line
    -> checkpoint every k steps

Sync is async with zero staleness: every response of step s is sampled by the weights of version s - 1, which
the trainer holds when it updates.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from recipes.engine_config import EngineSite
from recipes.engines.protocol import RolloutEngine
from recipes.policy_trainer import PolicyTrainer
from recipes.precision_probe import probe, write_probe
from recipes.requests import GroupSpec, step_requests
from recipes.rollout import generate_all, score_all
from recipes.samples import SampleStatus, ScoredSample
from recipes.setup import RunSetup, prepare_run
from recipes.teacher_set import TeacherSet
from recipes.teacher_stream import TeacherStream, attach_teacher, build_teachers
from recipes.tensorboard_log import TensorBoardLog
from recipes.validation import validate
from recipes.weight_sync import LocalWeightSync
from rollout_core import NOT_SAMPLED
from run_logging import Progress
from trainers.dumps import write_dump

from sync_ppo.checkpoint import TrainerProgress, load_checkpoint, save_checkpoint
from sync_ppo.cli import DEFAULT_RUNS_ROOT
from sync_ppo.config import SyncConfig
from sync_ppo.summary import RunSummary, summarize, write_plots

PROGRESS_FIELDS = {"reward": "reward/mean", "val_acc": "val/greedy_acc", "tok/s": "perf/step_tokens_per_s"}


@dataclass
class SyncPPO:
    """The step of the loop, over the run's pieces."""

    s: RunSetup
    engine: RolloutEngine
    trainer: PolicyTrainer
    sync: LocalWeightSync
    teacher: TeacherSet | None = None  # on-policy distillation: scores each finished group
    teacher_val_acc: float | None = None  # the default teacher's greedy accuracy, measured when it was built

    @property
    def cfg(self) -> SyncConfig:
        return self.s.cfg  # type: ignore[return-value]

    def due(self, step: int, every: int) -> bool:
        return (every > 0 and step % every == 0) or step == self.cfg.run.steps

    async def generate(self, step: int) -> tuple[list[ScoredSample], dict[str, float]]:
        r, s = self.cfg.rollout, self.s
        spec = GroupSpec(r.prompts_per_step, r.samples_per_prompt, r.temperature, s.max_new_tokens, self.cfg.run.seed)
        requests = step_requests(s.task.splits.train, spec, step)
        stream = None if self.teacher is None else TeacherStream(self.teacher)
        t0 = time.perf_counter()
        trajectories = await generate_all(
            self.engine.engine,
            s.tokenizer,
            requests,
            tool=s.task.tool,
            max_resumes=r.max_resumes,
            after_group=None if stream is None else stream.after_group,
        )
        wall = time.perf_counter() - t0
        tokens = sum(v != NOT_SAMPLED for t in trajectories for v in t.token_versions)
        scored = score_all(s.tokenizer, s.task.reward_fn, requests, trajectories, timeout_s=r.reward_timeout_s)
        metrics = {"timing/generate_s": wall, "rollout/generated_tokens": float(tokens)}
        if stream is not None:
            scored = attach_teacher(scored, stream.scores)
            metrics |= stream.metrics()
        return scored, metrics | {"perf/rollout_tokens_per_s": tokens / max(wall, 1e-9)}

    async def push_weights(self) -> None:
        """The engine serves exactly the trainer's new weights, tagged with the trainer's version (nothing is in
        flight between two synchronous steps)."""
        handle = self.trainer.publish(self.sync)
        await self.engine.push(self.sync.fetch(handle), handle.version, "abort")

    async def validate(self, step: int) -> dict[str, float]:
        s = self.s
        result = await validate(
            self.engine.engine,
            s.tokenizer,
            s.task.reward_fn,
            s.val_examples(),
            self.cfg.validation,
            step=step,
            seed=self.cfg.run.seed,
            max_new_tokens=s.max_new_tokens,
            tool=s.task.tool,
            reward_timeout_s=self.cfg.rollout.reward_timeout_s,
        )
        write_dump(s.run.validation(step), step, result.records)
        return result.metrics

    def probe_precision(self, step: int, scored: list[ScoredSample]) -> None:
        """`--debug.precision_steps`: the engine's and the trainer's forward of the step's first responses, op by op
        (`debug/precision/step_<s>.jsonl`; `python -m recipes.precision_report` reads it)."""
        import torch

        d = self.cfg.debug
        ok = [s.trajectory.all_ids for s in scored if s.status is SampleStatus.OK][: d.precision_samples]
        bf16 = self.cfg.backend.compute_dtype == "bfloat16"
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
        diffs = probe(self.engine.native.model, self.trainer.steps.policy_model(), ok, d.precision_layers, autocast)
        write_probe(self.s.run.root, step, diffs)

    async def step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        scored, metrics = await self.generate(step)
        if step in self.cfg.debug.precision_steps:
            self.probe_precision(step, scored)
        t1 = time.perf_counter()
        metrics |= self.trainer.train(step, scored)
        t2 = time.perf_counter()
        await self.push_weights()
        t3 = time.perf_counter()
        if self.due(step, self.cfg.validation.every_steps):
            metrics |= await self.validate(step)
        metrics |= {
            "timing/train_s": t2 - t1,
            "timing/push_s": t3 - t2,
            "timing/validate_s": time.perf_counter() - t3,
            "engine/weight_version": float(self.engine.engine.weight_version),
        }
        metrics["timing/step_s"] = time.perf_counter() - t0
        metrics["perf/step_tokens_per_s"] = metrics["rollout/generated_tokens"] / metrics["timing/step_s"]
        return metrics


async def _build(cfg: SyncConfig, resume: bool = False) -> SyncPPO:
    s = prepare_run(cfg, resume=resume, runs_root=DEFAULT_RUNS_ROOT)
    engine: RolloutEngine | None = None
    teacher: TeacherSet | None = None
    teacher_acc = None
    try:
        site = EngineSite(
            s.checkpoint_dir,
            s.max_len,
            cfg.run.seed,
            str(s.run.root / "engine"),
            true_on_policy=cfg.numerics.true_on_policy,
        )
        engine = await cfg.rollout.engine.build(site)
        if cfg.algorithm.kind == "opd":
            teacher = await build_teachers(cfg.teacher, s)
            teacher_acc = teacher.roster.default.val_accuracy
        trainer = PolicyTrainer.build(
            cfg, s.checkpoint_dir, pad_token_id=s.tokenizer.pad_id, max_new_tokens=s.max_new_tokens, run=s.run
        )
    except BaseException:
        for part in (teacher, engine):
            if part is not None:
                await part.close()
        s.close()
        raise
    return SyncPPO(s, engine, trainer, LocalWeightSync(), teacher, teacher_acc)


async def _start(loop: SyncPPO, resume: bool) -> TrainerProgress:
    """A fresh run validates the base model (step 0); a resumed one restores the latest complete checkpoint."""
    s, steps = loop.s, loop.trainer.steps
    if not resume:
        metrics = await loop.validate(0)
        if loop.teacher_val_acc is not None:
            metrics["teacher/val_acc"] = loop.teacher_val_acc
        s.log.log(0, metrics)
        return TrainerProgress(0, steps.version, loop.cfg.run.seed, metrics.get("val/greedy_acc"), 0.0)
    path = s.run.latest_checkpoint()
    if path is None:
        raise ValueError(f"--resume: expected a complete checkpoint under {s.run.checkpoints}, got none")
    state, progress = load_checkpoint(path)
    steps.load_state_dict(state)
    if progress.engine_version != steps.version:
        raise ValueError(f"{path}: engine version {progress.engine_version} != backend version {steps.version}")
    await loop.push_weights()
    s.log.truncate_after(progress.step)
    return progress


async def run_loop(cfg: SyncConfig, resume: bool) -> RunSummary:
    import torch

    torch.set_num_threads(cfg.run.torch_threads)
    loop = await _build(cfg, resume)
    s = loop.s
    t0 = time.perf_counter()
    try:
        progress = await _start(loop, resume)
        elapsed0 = progress.elapsed_s
        bar = Progress(cfg.run.steps, PROGRESS_FIELDS, initial=progress.step, disable=not cfg.run.progress)
        board = TensorBoardLog.open_if_installed(s.run.root / "tensorboard")
        try:
            for step in range(progress.step + 1, cfg.run.steps + 1):
                metrics = await loop.step(step)
                s.log.log(step, metrics)
                if board is not None:
                    board.log(step, metrics)
                bar.update(step, metrics)
                progress = TrainerProgress(
                    step,
                    loop.engine.engine.weight_version,
                    cfg.run.seed,
                    progress.base_val_acc,
                    elapsed0 + time.perf_counter() - t0,
                )
                if loop.due(step, cfg.run.checkpoint_every):
                    save_checkpoint(s.run, loop.trainer.steps.state_dict(), progress, keep=cfg.run.keep_checkpoints)
        finally:
            bar.close()
            if board is not None:
                board.close()
    finally:
        await loop.engine.close()
        loop.trainer.close()
        if loop.teacher is not None:
            await loop.teacher.close()
        s.close()
    if cfg.run.plots:
        write_plots(s.run)
    wall = elapsed0 + time.perf_counter() - t0
    return summarize(s.run, seed=cfg.run.seed, wall_s=wall, base_val_acc=progress.base_val_acc)


def train(cfg: SyncConfig, *, resume: bool = False) -> RunSummary:
    """Runs (or resumes) a whole training run; returns its summary."""
    return asyncio.run(run_loop(cfg, resume))
