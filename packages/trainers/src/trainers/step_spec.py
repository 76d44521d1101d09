"""StepSpec: what a process needs to build the policy, its optimiser and the algorithm (picklable: the rank
processes of `trainers.rank_group` receive it)."""

from __future__ import annotations

from dataclasses import dataclass

from trainers.algorithm.config import AlgorithmConfig
from trainers.backend.optim_config import OptimConfig
from trainers.train_config import TrainLoopConfig


@dataclass(frozen=True)
class StepSpec:
    """Everything a process needs to build the policy, its optimiser and the algorithm (picklable: rank
    processes receive it). `total_steps`: the run's optimiser steps (the cosine horizon)."""

    checkpoint_dir: str  # the base model, Hugging Face format
    algorithm: AlgorithmConfig
    loop: TrainLoopConfig
    optim: OptimConfig
    max_new_tokens: int
    temperature: float
    seed: int
    total_steps: int
    true_on_policy: bool = False
    vocab_size: int | None = None  # the tokenizer's ids: the only ones scored (None: every embedding row)
