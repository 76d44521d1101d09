"""The synchronous PPO/GRPO loop. One step:

    generate (rollout engine, samples_per_prompt per prompt, all at once; with distillation a teacher scores each
    group as it finishes) -> reward (errors counted, excluded)
    -> policy trainer: drop non-ok samples, pad, advantages, update (algorithm on backend), rollout dump
    -> push weights (pause, update_weights(version + 1), resume) -> validate every k steps -> metrics line
    -> checkpoint every k steps (the loop, start and resume are `run_lifecycle.drive`'s)

Sync is async with zero staleness: every response of step s is sampled by the weights of version s - 1, which
the trainer holds when it updates.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from moe_models.precision_probe import probe, write_probe
from rollout_core import NOT_SAMPLED, RolloutEngine
from run_lifecycle import Checkpoint, RunSummary, drive, due

from trainers.backend import BackendState
from trainers.distillation.stream import TeacherStream, attach_teacher
from trainers.distillation.teacher_set import TeacherSet
from trainers.dumps import write_dump
from trainers.recipe.export import POLICY_DIR, write_policy
from trainers.recipe.policy_trainer import PolicyTrainer
from trainers.recipe.setup import RunSetup, prepare_run
from trainers.recipe.tensorboard_log import TensorBoardLog
from trainers.rollout.engine_site import EngineSite
from trainers.rollout.requests import GroupSpec, step_requests
from trainers.rollout.rollout import generate_all, score_all
from trainers.rollout.samples import SampleStatus, ScoredSample
from trainers.rollout.validation import validate
from trainers.sync_ppo.config import SyncConfig
from trainers.sync_ppo.report import REPORT, SyncDetails


@dataclass
class SyncPPO:
    """The step of the loop, over the run's pieces (a `run_lifecycle.RunApp`)."""

    s: RunSetup
    engine: RolloutEngine
    trainer: PolicyTrainer
    teacher: TeacherSet | None = None  # on-policy distillation: scores each finished group
    teacher_val_acc: float | None = None  # the default teacher's greedy accuracy, measured when it was built
    board: TensorBoardLog | None = None  # a mirror of metrics.jsonl when tensorboard is installed

    @property
    def cfg(self) -> SyncConfig:
        return self.s.cfg  # type: ignore[return-value]

    async def generate(self, step: int) -> tuple[list[ScoredSample], dict[str, float]]:
        r, s = self.cfg.rollout, self.s
        spec = GroupSpec(r.prompts_per_step, r.samples_per_prompt, r.temperature, s.max_new_tokens, self.cfg.run.seed)
        requests = step_requests(s.task.splits.train, spec, step)
        stream = None if self.teacher is None else TeacherStream(self.teacher)
        t0 = time.perf_counter()
        trajectories = await generate_all(
            self.engine,
            s.renderer,
            requests,
            tool=s.task.tool,
            max_resumes=r.max_resumes,
            after_group=None if stream is None else stream.after_group,
        )
        wall = time.perf_counter() - t0
        tokens = sum(v != NOT_SAMPLED for t in trajectories for v in t.token_versions)
        scored = score_all(s.renderer, s.task.reward_fn, requests, trajectories, timeout_s=r.reward_timeout_s)
        metrics = {"timing/generate_s": wall, "rollout/generated_tokens": float(tokens)}
        if stream is not None:
            scored = attach_teacher(scored, stream.scores)
            metrics |= stream.metrics()
        return scored, metrics | {"perf/rollout_tokens_per_s": tokens / max(wall, 1e-9)}

    async def push_weights(self) -> None:
        """The engine serves exactly the trainer's new weights, tagged with the trainer's version (nothing is in
        flight between two synchronous steps). The engine copies them in: in one process they need no packing."""
        weights, version = self.trainer.engine_weights()
        await self.engine.push(weights, version, "abort")

    async def validate(self, step: int) -> dict[str, float]:
        s = self.s
        result = await validate(
            self.engine,
            s.renderer,
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
        (`debug/precision/step_<s>.jsonl`; `python -m moe_models.precision_report` reads it)."""
        import torch

        d = self.cfg.debug
        ok = [s.trajectory.all_ids for s in scored if s.status is SampleStatus.OK][: d.precision_samples]
        bf16 = self.cfg.backend.compute_dtype == "bfloat16"
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
        diffs = probe(self.engine.model, self.trainer.steps.policy_model(), ok, d.precision_layers, autocast)
        write_probe(self.s.run.root, step, diffs)

    async def start(self, checkpoint: Checkpoint | None) -> None:
        """A fresh run validates the base model (step 0); a resumed one restores the checkpoint's backend state and
        pushes its weights."""
        if checkpoint is None:
            metrics = await self.validate(0)
            if self.teacher_val_acc is not None:
                metrics["teacher/val_acc"] = self.teacher_val_acc
            self.record(0, metrics)
            return
        steps = self.trainer.steps
        steps.load_state_dict(BackendState.load(checkpoint.path))
        if checkpoint.progress.version != steps.version:
            raise ValueError(
                f"{checkpoint.path}: expected the backend version {steps.version}, got {checkpoint.progress.version}"
            )
        await self.push_weights()

    def record(self, step: int, metrics: dict[str, float]) -> None:
        self.s.log.log(step, metrics)
        if self.board is not None:
            self.board.log(step, metrics)

    async def step(self, step: int, checkpoint: Path | None) -> dict[str, float]:
        metrics = await self.run_step(step)
        self.record(step, metrics)
        return metrics

    async def save(self, step: int, folder: Path) -> int:
        """The backend state; the run's last checkpoint also holds the policy as a Hugging Face folder."""
        steps = self.trainer.steps
        steps.state_dict().save(folder)
        if step == self.cfg.run.steps:
            write_policy(folder / POLICY_DIR, steps.export_weights()[0], self.s.base_dir, self.s.tokenizer)
        return self.engine.weight_version

    async def close(self, completed: bool) -> None:
        try:
            await self.engine.close()
            self.trainer.close()
            if self.teacher is not None:
                await self.teacher.close()
            if self.board is not None:
                self.board.close()
        finally:
            self.s.close()

    async def run_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        scored, metrics = await self.generate(step)
        if step in self.cfg.debug.precision_steps:
            self.probe_precision(step, scored)
        t1 = time.perf_counter()
        metrics |= self.trainer.train(step, scored)
        t2 = time.perf_counter()
        await self.push_weights()
        t3 = time.perf_counter()
        if due(step, self.cfg.validation.every_steps, self.cfg.run.steps):
            metrics |= await self.validate(step)
        metrics |= {
            "timing/train_s": t2 - t1,
            "timing/push_s": t3 - t2,
            "timing/validate_s": time.perf_counter() - t3,
            "engine/weight_version": float(self.engine.weight_version),
        }
        metrics["timing/step_s"] = time.perf_counter() - t0
        metrics["perf/step_tokens_per_s"] = metrics["rollout/generated_tokens"] / metrics["timing/step_s"]
        return metrics


async def _build(cfg: SyncConfig, resume: bool = False) -> SyncPPO:
    s = prepare_run(cfg, resume=resume, runs_root=cfg.RUNS_ROOT)
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
            vocab_size=s.vocab_size,
        )
        engine = await cfg.rollout.engine.build(site)
        if cfg.algorithm.kind == "opd":
            teacher = await s.teachers()
            teacher_acc = teacher.roster.default.val_accuracy
        trainer = PolicyTrainer.build(
            cfg,
            s.checkpoint_dir,
            pad_token_id=s.pad_id,
            vocab_size=s.vocab_size,
            max_new_tokens=s.max_new_tokens,
            run=s.run,
        )
        board = TensorBoardLog.open_if_installed(s.run.root / "tensorboard")
    except BaseException:
        for part in (teacher, engine):
            if part is not None:
                await part.close()
        s.close()
        raise
    return SyncPPO(s, engine, trainer, teacher, teacher_acc, board)


async def run_loop(cfg: SyncConfig, resume: bool) -> RunSummary[SyncDetails]:
    import torch

    torch.set_num_threads(cfg.run.trainer_threads(alone=True))  # the engine waits while the trainer trains
    loop = await _build(cfg, resume)
    return await drive(loop, loop.s.run, loop.s.log, cfg.run, REPORT, resume=resume)


def train(cfg: SyncConfig, *, resume: bool = False) -> RunSummary[SyncDetails]:
    """Runs (or resumes) a whole training run; returns its summary."""
    return asyncio.run(run_loop(cfg, resume))
