"""PolicyTrainer: the trainer side of a step, the same in both apps: scored samples -> step batch ->
`trainers.train_step` (any algorithm, any backend) -> the step's rollout dump and metrics.

The data stays here: the dump (every response of the step, dropped ones with their status, with its advantage)
is written by the process that trains; its caller gets metrics only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from run_lifecycle import RunDir

from trainers import TrainLoopConfig, required_multiple
from trainers.distillation.stream import teacher_metrics
from trainers.dumps import write_dump
from trainers.recipe.config import RecipeConfig
from trainers.rollout.dumps import dump_record
from trainers.rollout.quality import rollout_metrics
from trainers.rollout.samples import ScoredSample
from trainers.rollout.step_batch import StepBatch, build_step_batch
from trainers.step_runner import StepRunner, build_steps
from trainers.step_spec import StepSpec
from trainers.weight_sync import WeightHandle, WeightSync


class PolicyTrainer:
    def __init__(
        self,
        steps: StepRunner,
        loop: TrainLoopConfig,
        *,
        pad_token_id: int,
        run: RunDir,
        weight_dtype: torch.dtype | None = None,
    ) -> None:
        """`steps`: where the backend and the algorithm run; `weight_dtype`: floating weights are published in it
        (the engines' dtype; None: the trainer's own)."""
        self.steps, self.loop = steps, loop
        self.weight_dtype = weight_dtype
        self.pad_token_id, self.run = pad_token_id, run
        self.multiple = required_multiple(steps.world_size, loop.mini_batches_per_step)

    @classmethod
    def build(
        cls,
        cfg: RecipeConfig,
        checkpoint_dir: str,
        *,
        pad_token_id: int,
        vocab_size: int | None,
        max_new_tokens: int,
        run: RunDir,
    ) -> PolicyTrainer:
        """The policy (and, for a KL term, a frozen reference) from the base checkpoint, the configured backend and
        algorithm, built where the backend config says (this process, or rank processes of their own); it scores the
        tokenizer's `vocab_size` ids only (None: every embedding row)."""
        total = cfg.run.steps * cfg.train.mini_batches_per_step * cfg.train.ppo_epochs  # optimiser steps of the run
        spec = StepSpec(
            checkpoint_dir,
            cfg.algorithm,
            cfg.train,
            cfg.optim,
            max_new_tokens=max_new_tokens,
            temperature=cfg.rollout.temperature,
            seed=cfg.run.seed,
            total_steps=total,
            true_on_policy=cfg.numerics.true_on_policy,
            vocab_size=vocab_size,
        )
        engine_dtype = getattr(cfg.rollout.engine, "dtype", "float32")  # sglang: its servers' own
        return cls(
            build_steps(cfg.backend, spec),
            cfg.train,
            pad_token_id=pad_token_id,
            run=run,
            weight_dtype=getattr(torch, engine_dtype),
        )

    @property
    def version(self) -> int:
        return self.steps.version

    def prepare(self, scored: Sequence[ScoredSample]) -> StepBatch:
        return build_step_batch(scored, multiple=self.multiple, pad_token_id=self.pad_token_id)

    def update(self, step: int, sb: StepBatch, scored: Sequence[ScoredSample]) -> dict[str, float]:
        """One update on `sb`; writes `rollouts/<step>.jsonl` (every response of `scored`, never a pad)."""
        result = self.steps.train_step(sb.batch)
        advantage = {s.uid: a for s, a in zip(sb.samples, result.advantages, strict=True) if not s.is_padding}
        records = [dump_record(s, step=step, advantage=advantage.get(s.uid)) for s in scored]
        write_dump(self.run.rollouts(step), step, records)
        return result.metrics | rollout_metrics(scored, sb.num_padding) | teacher_metrics(scored)

    def train(self, step: int, scored: Sequence[ScoredSample]) -> dict[str, float]:
        return self.update(step, self.prepare(scored), scored)

    def engine_weights(self) -> tuple[dict[str, torch.Tensor], int]:
        """The trainer's weights (a copy, CPU) and their version, floating ones in `weight_dtype` (bf16 engines get
        bf16: half the bytes, and the rounding the engine would apply anyway happens once, here)."""
        weights, version = self.steps.export_weights()
        if self.weight_dtype is not None:
            weights = {k: v.to(self.weight_dtype) if v.is_floating_point() else v for k, v in weights.items()}
        return weights, version

    def publish(self, sync: WeightSync) -> WeightHandle:
        """`engine_weights` published as their version."""
        weights, version = self.engine_weights()
        return sync.publish(weights, version)

    def close(self) -> None:
        self.steps.close()
