"""PolicyTrainer: the trainer side of a step, the same in both apps: scored samples -> step batch ->
`trainers.train_step` (any algorithm, any backend) -> the step's rollout dump and metrics.

The data stays here: the dump (every response of the step, dropped ones with their status, with its advantage)
is written by the process that trains; its caller gets metrics only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from moe_models import load_pretrained
from run_logging import RunDir
from trainers import TrainLoopConfig, required_multiple, train_step
from trainers.algorithm import Algorithm
from trainers.backend import TrainingBackend
from trainers.dumps import DumpKind

from recipes.config import RecipeConfig
from recipes.dumps import dump_record, write_step_dump
from recipes.quality import rollout_metrics
from recipes.samples import ScoredSample
from recipes.step_batch import StepBatch, build_step_batch
from recipes.teacher_stream import teacher_metrics
from recipes.weight_sync import WeightHandle, WeightSync


class PolicyTrainer:
    def __init__(self, backend: TrainingBackend, algorithm: Algorithm, loop: TrainLoopConfig, *, pad_token_id: int,
                 seed: int, run: RunDir, weight_dtype: torch.dtype | None = None) -> None:  # fmt: skip
        """`weight_dtype`: floating weights are published in it (the engines' dtype; None: the trainer's own)."""
        self.backend, self.algorithm, self.loop = backend, algorithm, loop
        self.weight_dtype = weight_dtype
        self.pad_token_id, self.seed, self.run = pad_token_id, seed, run
        dp = backend.data_parallel
        self.multiple = required_multiple(1 if dp is None else dp.world_size, loop.mini_batches_per_step)

    @classmethod
    def build(cls, cfg: RecipeConfig, checkpoint_dir: str, *, pad_token_id: int, max_new_tokens: int,
              run: RunDir) -> PolicyTrainer:  # fmt: skip
        """The policy (and, for a KL term, a frozen reference) from the base checkpoint, the configured backend and
        algorithm."""
        torch.manual_seed(cfg.run.seed)
        algorithm = cfg.algorithm.build(max_new_tokens=max_new_tokens)
        reference = load_pretrained(checkpoint_dir) if algorithm.needs_reference else None
        total = cfg.run.steps * cfg.train.mini_batches_per_step * cfg.train.ppo_epochs  # optimiser steps of the run
        backend = cfg.backend.build(load_pretrained(checkpoint_dir), cfg.optim, temperature=cfg.rollout.temperature,
                                    reference=reference, total_steps=total,
                                    true_on_policy=cfg.numerics.true_on_policy)  # fmt: skip
        engine_dtype = getattr(cfg.rollout.engine, "dtype", "float32")  # sglang: its servers' own
        return cls(backend, algorithm, cfg.train, pad_token_id=pad_token_id, seed=cfg.run.seed, run=run,
                   weight_dtype=getattr(torch, engine_dtype))  # fmt: skip

    @property
    def version(self) -> int:
        return self.backend.version

    def prepare(self, scored: Sequence[ScoredSample]) -> StepBatch:
        return build_step_batch(scored, multiple=self.multiple, pad_token_id=self.pad_token_id)

    def update(self, step: int, sb: StepBatch, scored: Sequence[ScoredSample]) -> dict[str, float]:
        """One update on `sb`; writes `rollouts/<step>.jsonl` (every response of `scored`, never a pad)."""
        result = train_step(self.backend, self.algorithm, sb.batch, self.loop, seed=self.seed)
        advantage = {s.uid: a for s, a in zip(sb.samples, result.advantages, strict=True) if not s.is_padding}
        records = [dump_record(s, step=step, advantage=advantage.get(s.uid)) for s in scored]
        write_step_dump(self.run.rollouts(step), DumpKind.TRAIN, step, records)
        return result.metrics | rollout_metrics(scored, sb.num_padding) | teacher_metrics(scored)

    def train(self, step: int, scored: Sequence[ScoredSample]) -> dict[str, float]:
        return self.update(step, self.prepare(scored), scored)

    def publish(self, sync: WeightSync) -> WeightHandle:
        """The trainer's weights as `version`, floating ones in `weight_dtype` (bf16 engines get bf16: half the
        bytes, and the rounding the engine would apply anyway happens once, here)."""
        weights, version = self.backend.export_weights()
        if self.weight_dtype is not None:
            weights = {k: v.to(self.weight_dtype) if v.is_floating_point() else v for k, v in weights.items()}
        return sync.publish(weights, version)
