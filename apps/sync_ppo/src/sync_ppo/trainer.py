"""The synchronous PPO/GRPO loop. One step:

    generate (native engine, samples_per_prompt per prompt, all at once) -> reward (errors counted, excluded)
    -> drop non-ok samples -> pad with inert samples -> advantages -> PPO update (router replay)
    -> push weights (pause, update_weights(version + 1), resume) -> validate every k steps
    -> dumps -> metrics line -> checkpoint every k steps

Sync is async with zero staleness: every response of step s is sampled by the weights of version s - 1, which
the trainer holds when it updates.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from native_engine import NativeEngine
from rollout_core import SamplingParams
from run_logging import Progress
from trainers.backend import TrainingBackend
from trainers.dumps import DumpKind

from sync_ppo.checkpoint import TrainerProgress, load_checkpoint, save_checkpoint
from sync_ppo.components import Components, build_components
from sync_ppo.config import AppConfig
from sync_ppo.dump_records import dump_record, write_step_dump
from sync_ppo.prompts import sample_seed, step_prompts
from sync_ppo.rollout import GenRequest, SampleStatus, ScoredSample, generate_all, score_all
from sync_ppo.step_batch import StepBatch, build_step_batch
from sync_ppo.summary import RunSummary, summarize, write_plots
from sync_ppo.tensorboard_log import TensorBoardLog
from sync_ppo.validation import ValidationResult, validate

PROGRESS_FIELDS = {"reward": "reward/mean", "val_acc": "val/greedy_acc", "tok/s": "perf/step_tokens_per_s"}


class SyncPPO:
    """The step of the loop, over the run's components (engine, backend, task, run directory)."""

    def __init__(self, c: Components) -> None:
        self.c = c
        self.cfg = c.cfg

    def requests(self, step: int) -> list[GenRequest]:
        r, seed = self.cfg.rollout, self.cfg.run.seed
        out = []
        for i, ex in enumerate(step_prompts(self.c.splits.train, step, r.prompts_per_step, seed)):
            for j in range(r.samples_per_prompt):
                params = SamplingParams(max_new_tokens=self.c.max_new_tokens, temperature=r.temperature,
                                        seed=sample_seed(seed, step, i, j))  # fmt: skip
                out.append(GenRequest(f"s{step}-p{i}-r{j}", f"s{step}-p{i}", ex, i, j, params))
        return out

    async def generate(self, step: int) -> tuple[list[ScoredSample], dict[str, float]]:
        requests = self.requests(step)
        before = self.c.engine.metrics().generated_tokens
        t0 = time.perf_counter()
        trajectories = await generate_all(self.c.engine, self.c.tokenizer, requests)
        wall = time.perf_counter() - t0
        tokens = self.c.engine.metrics().generated_tokens - before
        scored = score_all(self.c.tokenizer, self.c.reward_fn, requests, trajectories)
        metrics = {"timing/generate_s": wall, "rollout/generated_tokens": float(tokens)}
        return scored, metrics | {"perf/rollout_tokens_per_s": tokens / max(wall, 1e-9)}

    def update(self, sb: StepBatch) -> dict[str, float]:
        backend = self.c.backend
        old = None
        if self.cfg.algorithm.old_log_probs == "recompute":
            old = backend.log_probs(sb.batch, replay=self.cfg.algorithm.router_replay)
        return backend.train_step(sb.batch, sb.advantages, old)

    async def push_weights(self) -> None:
        await push_weights(self.c.engine, self.c.backend)

    async def validate(self, step: int) -> ValidationResult:
        result = await validate(
            self.c.engine, self.c.tokenizer, self.c.reward_fn, self.c.val_examples, self.cfg.validation,
            step=step, seed=self.cfg.run.seed, max_new_tokens=self.c.max_new_tokens,
        )  # fmt: skip
        write_step_dump(self.c.run.validation(step), DumpKind.VAL, step, result.records)
        return result

    def dump_rollouts(self, step: int, scored: list[ScoredSample], sb: StepBatch) -> None:
        """Every real response of the step (dropped ones too, with their status); never a padding sample."""
        advantage = {s.uid: float(a) for s, a in zip(sb.samples, sb.advantages.tolist(), strict=True)}
        records = [
            dump_record(s, step=step, uid=s.request.request_id, advantage=advantage.get(s.request.request_id))
            for s in scored
        ]
        write_step_dump(self.c.run.rollouts(step), DumpKind.TRAIN, step, records)

    def due(self, step: int, every: int) -> bool:
        return (every > 0 and step % every == 0) or step == self.cfg.run.steps

    async def step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        scored, metrics = await self.generate(step)
        sb = build_step_batch(scored, multiple=self.cfg.train.mini_batches_per_step,
                              pad_token_id=self.c.tokenizer.pad_id, advantage=self.cfg.algorithm.advantage)  # fmt: skip
        t1 = time.perf_counter()
        metrics |= self.update(sb)
        t2 = time.perf_counter()
        await self.push_weights()
        t3 = time.perf_counter()
        if self.due(step, self.cfg.validation.every_steps):
            metrics |= (await self.validate(step)).metrics
        self.dump_rollouts(step, scored, sb)
        metrics |= rollout_metrics(scored, sb)
        metrics |= {"timing/train_s": t2 - t1, "timing/push_s": t3 - t2, "timing/validate_s": time.perf_counter() - t3,
                    "engine/weight_version": float(self.c.engine.weight_version)}  # fmt: skip
        metrics["timing/step_s"] = time.perf_counter() - t0
        metrics["perf/step_tokens_per_s"] = metrics["rollout/generated_tokens"] / metrics["timing/step_s"]
        return metrics


async def push_weights(engine: NativeEngine, backend: TrainingBackend) -> None:
    """The engine serves exactly the trainer's new weights, tagged with the trainer's version."""
    state, version = backend.export_weights()
    await engine.pause("abort")  # sync: nothing is in flight between steps
    await engine.update_weights(state, version)
    await engine.resume()


def rollout_metrics(scored: list[ScoredSample], sb: StepBatch) -> dict[str, float]:
    """Quality metrics over real samples only (pads never count)."""
    ok = [s for s in scored if s.status is SampleStatus.OK]
    lengths = [len(s.trajectory.response_ids) for s in ok]
    return {
        "reward/mean": statistics.fmean(s.reward for s in ok),
        "reward/acc": statistics.fmean(s.acc for s in ok),
        "reward/num_error": float(sum(s.status is SampleStatus.REWARD_ERROR for s in scored)),
        "rollout/num_dropped": float(sum(s.status is SampleStatus.NOT_OK for s in scored)),
        "rollout/num_samples": float(len(ok)),
        "rollout/num_padding": float(sb.num_padding),
        "rollout/response_length_mean": statistics.fmean(lengths),
        "rollout/response_length_max": float(max(lengths)),
        "rollout/groups_all_equal_frac": _flat_group_fraction(ok),
    }


def _flat_group_fraction(ok: list[ScoredSample]) -> float:
    """Fraction of prompts whose responses all got the same reward (GRPO learns nothing from them)."""
    groups: dict[str, set[float]] = {}
    for s in ok:
        groups.setdefault(s.request.group_id, set()).add(s.reward)
    return sum(len(v) == 1 for v in groups.values()) / len(groups)


async def _start(loop: SyncPPO, resume: bool) -> TrainerProgress:
    """A fresh run validates the base model (step 0); a resumed one restores the latest complete checkpoint."""
    c = loop.c
    if not resume:
        base = await loop.validate(0)
        c.log.log(0, base.metrics)
        return TrainerProgress(0, c.backend.version, c.cfg.run.seed, base.greedy_acc, 0.0)
    path = c.run.latest_checkpoint()
    if path is None:
        raise ValueError(f"--resume: expected a complete checkpoint under {c.run.checkpoints}, got none")
    state, progress = load_checkpoint(path)
    c.backend.load_state_dict(state)
    if progress.engine_version != c.backend.version:
        raise ValueError(f"{path}: engine version {progress.engine_version} != backend version {c.backend.version}")
    await loop.push_weights()
    c.log.truncate_after(progress.step)
    return progress


async def run_loop(cfg: AppConfig, resume: bool) -> RunSummary:
    c = build_components(cfg)
    loop = SyncPPO(c)
    t0 = time.perf_counter()
    progress = await _start(loop, resume)
    elapsed0 = progress.elapsed_s
    bar = Progress(cfg.run.steps, PROGRESS_FIELDS, initial=progress.step, disable=not cfg.run.progress)
    board = TensorBoardLog.open_if_installed(c.run.root / "tensorboard")
    try:
        for step in range(progress.step + 1, cfg.run.steps + 1):
            metrics = await loop.step(step)
            c.log.log(step, metrics)
            if board is not None:
                board.log(step, metrics)
            bar.update(step, metrics)
            progress = TrainerProgress(step, c.engine.weight_version, cfg.run.seed, progress.base_val_acc,
                                       elapsed0 + time.perf_counter() - t0)  # fmt: skip
            if loop.due(step, cfg.run.checkpoint_every):
                save_checkpoint(c.run, c.backend.state_dict(), progress, keep=cfg.run.keep_checkpoints)
    finally:
        bar.close()
        if board is not None:
            board.close()
        await c.engine.close()
    if cfg.run.plots:
        write_plots(c.run)
    wall = elapsed0 + time.perf_counter() - t0
    return summarize(c.run, seed=cfg.run.seed, wall_s=wall, base_val_acc=progress.base_val_acc)


def train(cfg: AppConfig, *, resume: bool = False) -> RunSummary:
    """Runs (or resumes) a whole training run; returns its summary."""
    return asyncio.run(run_loop(cfg, resume))
