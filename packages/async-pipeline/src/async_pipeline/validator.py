"""Validator: validation on an engine of its own, so it never mixes weight versions with training rollouts and
never holds up the trainer (the driver collects each result when it is ready).

`validate(weights, step)` loads exactly the weights of `step` (version `step`), runs the shared validation
(greedy mean@1 and, when configured, n sampled responses per prompt: mean@n, pass@k, ...), writes
`validation/<step>.jsonl` itself and returns the metrics only. Calls run one at a time, in the order they
arrive: the driver starts the next validation without waiting for the last (long responses can make one outlast
`validation.every_steps` trainer steps), and a weight load must never land under a validation in progress.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import torch
from engine_adapters.native import EngineConfig, NativeEngine
from run_lifecycle import RunDir
from trainers.dumps import write_dump
from trainers.recipe.config import ModelConfig, TaskConfig
from trainers.recipe.setup import run_renderer
from trainers.rollout.validation import validate
from trainers.rollout.validation_config import ValidationConfig
from trainers.weight_sync import WeightHandle

from async_pipeline.ray_session.node import NodeAware
from async_pipeline.ray_session.weight_sync import RayWeightSync

VALIDATOR_SLOTS = 256


class Validator(NodeAware):
    def __init__(
        self,
        checkpoint_dir: str,
        task: TaskConfig,
        model: ModelConfig,
        cfg: ValidationConfig,
        run_dir: str,
        *,
        vocab_size: int | None,
        max_len: int,
        max_new_tokens: int,
        seed: int,
        reward_timeout_s: float,
        torch_threads: int = 1,
        niceness: int = 0,
    ) -> None:
        torch.set_num_threads(torch_threads)
        os.nice(niceness)
        self.cfg, self.seed, self.max_new_tokens, self.run = cfg, seed, max_new_tokens, RunDir(Path(run_dir))
        self.reward_timeout_s = reward_timeout_s
        self.task = task.build()
        self.renderer = run_renderer(model, checkpoint_dir, self.task)
        val = self.task.splits.validation
        self.examples = val[: cfg.max_prompts] if cfg.max_prompts else val
        self.sync = RayWeightSync()
        self.engine = NativeEngine.from_pretrained(
            checkpoint_dir,
            EngineConfig(slots=VALIDATOR_SLOTS),
            vocab_size=vocab_size,
            max_len=max_len,
            seed=seed,
            num_threads=torch_threads,
            step_threads=torch_threads,
        )
        self._one_at_a_time = asyncio.Lock()  # FIFO: validations finish in the order the driver started them

    async def validate(self, weights: WeightHandle | None, step: int) -> dict[str, float]:
        """`weights` None: validate the weights already loaded (the base model at step 0)."""
        async with self._one_at_a_time:
            return await self._validate(weights, step)

    async def _validate(self, weights: WeightHandle | None, step: int) -> dict[str, float]:
        if weights is not None and weights.version != self.engine.weight_version:
            state = await self.sync.fetch_async(weights)
            await self.engine.update_weights(state, weights.version)
        result = await validate(
            self.engine,
            self.renderer,
            self.task.reward_fn,
            self.examples,
            self.cfg,
            step=step,
            seed=self.seed,
            max_new_tokens=self.max_new_tokens,
            tool=self.task.tool,
            reward_timeout_s=self.reward_timeout_s,
        )
        write_dump(self.run.validation(step), step, result.records)
        return result.metrics

    async def close(self) -> None:
        await self.engine.close()
