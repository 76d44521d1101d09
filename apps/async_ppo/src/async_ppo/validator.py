"""Validator: validation on an engine of its own, so it never mixes weight versions with training rollouts
and never holds up the trainer (the driver collects each result when it is ready).

`validate(state, version, step)` loads exactly the weights of `step` (version `step`) and runs sync_ppo's
validation: greedy mean@1 and, when configured, n sampled responses per prompt (mean@n, pass@k, ...).
"""

from __future__ import annotations

import os

import numpy as np
import torch
from moe_models import load_tokenizer
from native_engine import EngineConfig, NativeEngine
from rl_tasks.toy_task import build_splits, toy_reward_fn
from sync_ppo.config import TaskConfig, ValidationConfig
from sync_ppo.validation import ValidationResult, validate


class Validator:
    def __init__(self, checkpoint_dir: str, task: TaskConfig, cfg: ValidationConfig, *, max_len: int,
                 max_new_tokens: int, seed: int, torch_threads: int = 1, niceness: int = 0) -> None:  # fmt: skip
        torch.set_num_threads(torch_threads)
        os.nice(niceness)
        self.cfg = cfg
        self.seed = seed
        self.max_new_tokens = max_new_tokens
        self.tokenizer = load_tokenizer(checkpoint_dir)
        self.reward_fn = toy_reward_fn(task)
        val = build_splits(task).validation
        self.examples = val[: cfg.max_prompts] if cfg.max_prompts else val
        self.engine = NativeEngine.from_pretrained(
            checkpoint_dir, EngineConfig(max_slots=256, max_len=max_len, seed=seed, num_threads=torch_threads)
        )

    async def validate(self, state: dict[str, np.ndarray] | None, version: int, step: int) -> ValidationResult:
        """`state` None: validate the weights already loaded (the base model at step 0)."""
        if state is not None and version != self.engine.weight_version:
            await self.engine.update_weights(state, version)
        return await validate(
            self.engine, self.tokenizer, self.reward_fn, self.examples, self.cfg, step=step, seed=self.seed,
            max_new_tokens=self.max_new_tokens,
        )  # fmt: skip

    async def close(self) -> None:
        await self.engine.close()
