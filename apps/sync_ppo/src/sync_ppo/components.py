"""Everything a run holds: task, tokenizer, the native engine, the training backend and the run directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from moe_models import CharTokenizer, load_pretrained, load_tokenizer
from native_engine import EngineConfig, NativeEngine
from rl_tasks.example import TaskExample
from rl_tasks.greedy_eval import encode_prompt
from rl_tasks.reward import RewardFn
from rl_tasks.toy_task import TaskSplits, build_splits, toy_reward_fn
from rl_tasks.warmup import WarmupResult, ensure_base_checkpoint
from run_config import to_toml
from run_logging import MetricsLog, RunDir
from trainers.backend import TorchBackend, TorchBackendConfig

from sync_ppo.config import AlgorithmConfig, AppConfig, TrainConfig


@dataclass
class Components:
    cfg: AppConfig
    run: RunDir
    log: MetricsLog
    base: WarmupResult
    tokenizer: CharTokenizer
    splits: TaskSplits
    reward_fn: RewardFn
    engine: NativeEngine
    backend: TorchBackend
    max_new_tokens: int

    @property
    def val_examples(self) -> tuple[TaskExample, ...]:
        n = self.cfg.validation.max_prompts
        return self.splits.validation[:n] if n else self.splits.validation


def backend_config(t: TrainConfig, algorithm: AlgorithmConfig, *, temperature: float, seed: int) -> TorchBackendConfig:
    return TorchBackendConfig(
        lr=t.lr, weight_decay=t.weight_decay, grad_clip=t.grad_clip, ppo_epochs=t.ppo_epochs,
        mini_batches_per_step=t.mini_batches_per_step, micro_batch_tokens=t.micro_batch_tokens, clip_low=t.clip_low,
        clip_high=t.clip_high, dual_clip_c=t.dual_clip_c, agg_mode=t.agg_mode, temperature=temperature,
        mismatch_sample_seqs=t.mismatch_sample_seqs, seed=seed, policy_loss=algorithm.policy_loss,
        is_cap=algorithm.is_cap,
    )  # fmt: skip


def build_components(cfg: AppConfig) -> Components:
    """Builds (or reads the cached) warm-up base, then one engine and one trainer copy of it."""
    torch.set_num_threads(cfg.run.torch_threads)
    torch.manual_seed(cfg.run.seed)
    run = RunDir.create(cfg.run.dir)
    run.config.write_text(to_toml(cfg))
    base = ensure_base_checkpoint(cfg.task, cfg.warmup, Path(cfg.run.warmup_cache))
    tokenizer = load_tokenizer(base.checkpoint_dir)
    splits = build_splits(cfg.task)
    max_new = cfg.rollout.max_new_tokens or cfg.task.max_answer_chars + 1
    longest_prompt = max(len(encode_prompt(tokenizer, ex.prompt)) for ex in (*splits.train, *splits.validation))
    engine = NativeEngine.from_pretrained(
        base.checkpoint_dir,
        EngineConfig(
            max_slots=cfg.rollout.engine_slots,
            max_len=longest_prompt + max_new,
            seed=cfg.run.seed,
            compile_decode=cfg.rollout.compile_decode,
        ),
    )
    backend = TorchBackend(
        load_pretrained(base.checkpoint_dir),
        backend_config(cfg.train, cfg.algorithm, temperature=cfg.rollout.temperature, seed=cfg.run.seed),
        router_replay=cfg.algorithm.router_replay,
    )
    return Components(
        cfg=cfg, run=run, log=MetricsLog(run.metrics), base=base, tokenizer=tokenizer, splits=splits,
        reward_fn=toy_reward_fn(cfg.task), engine=engine, backend=backend, max_new_tokens=max_new,
    )  # fmt: skip
