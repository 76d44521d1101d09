"""The validator runs validations one at a time: a validation still generating when the driver starts the next
one (long responses can outlast `validation.every_steps` trainer steps) is neither broken nor given the next
step's weights."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from async_pipeline.validator import Validator
from run_lifecycle import parse_config
from trainers.dumps import read_dump
from trainers.recipe.config import RecipeConfig
from trainers.recipe.setup import check_run
from trainers.warmup import ensure_base_checkpoint
from trainers.weight_sync import LocalWeightSync, WeightHandle

# the tiny task of tests/async_ppo
TASK = [
    "--task.train_size", "400", "--task.val_size", "12", "--task.addition_weight", "0.5", "--task.sort_weight", "0.5",
    "--warmup.steps", "8", "--warmup.examples_per_step", "16",
]  # fmt: skip


@pytest.fixture(scope="module")
def warmup_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline-warmup-cache")


class _LocalFetch(LocalWeightSync):
    """Stands in for the Ray object store: a fetch yields to the event loop, as a Ray fetch does."""

    async def fetch_async(self, handle: WeightHandle) -> dict[str, torch.Tensor]:
        await asyncio.sleep(0)
        return self.fetch(handle)


def _validator(tmp_path: Path, warmup_cache: Path) -> tuple[Validator, dict[str, torch.Tensor]]:
    cfg = parse_config(RecipeConfig, [*TASK, "--validation.max_prompts", "8"])
    base = ensure_base_checkpoint(cfg.task, cfg.warmup, warmup_cache)
    plan = check_run(cfg)
    validator = Validator(
        str(base.checkpoint_dir),
        cfg.task,
        cfg.model,
        cfg.validation,
        str(tmp_path / "run"),
        vocab_size=plan.vocab_size,
        max_len=plan.max_len,
        max_new_tokens=plan.max_new_tokens,
        seed=0,
        reward_timeout_s=10.0,
    )
    validator.sync = _LocalFetch()  # type: ignore[assignment]
    return validator, {k: v.clone() for k, v in validator.engine.model.state_dict().items()}


def _scrambled(base: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Weights that answer nothing right (the base's, shuffled within each tensor)."""
    g = torch.Generator().manual_seed(seed)
    return {
        k: v.flatten()[torch.randperm(v.numel(), generator=g)].view_as(v) if v.is_floating_point() else v
        for k, v in base.items()
    }


def test_a_validation_started_during_another_waits_then_runs_under_its_own_weights(tmp_path: Path, warmup_cache: Path):
    validator, base = _validator(tmp_path, warmup_cache)
    sync: _LocalFetch = validator.sync  # type: ignore[assignment]

    async def run() -> int:
        first = asyncio.create_task(validator.validate(sync.publish(base, 1), 1))
        while not validator.engine._scheduler.live:  # step 1 is generating
            await asyncio.sleep(0.001)
        await validator.validate(sync.publish(_scrambled(base, 0), 2), 2)  # before the fix: EngineBusyError
        await first
        version = validator.engine.weight_version
        for step, weights in ((3, base), (4, _scrambled(base, 0))):  # the same weights again, one at a time
            await validator.validate(sync.publish(weights, step), step)
        await validator.close()
        return version

    assert asyncio.run(run()) == 2

    def responses(step: int) -> list[list[int]]:
        return [r.response_ids for r in read_dump(tmp_path / "run" / "validation" / f"{step}.jsonl")]

    assert responses(1) == responses(3) and responses(2) == responses(4)  # each under exactly its own weights
    assert responses(1) != responses(2)
