"""RunSetup: what the driver prepares before any actor starts (run directory, base checkpoint, actor specs).

The warm-up base is built (or read from its cache) here, once, so that every actor loads the same folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from moe_models import CharTokenizer, load_tokenizer
from rl_tasks.greedy_eval import encode_prompt
from rl_tasks.toy_task import build_splits
from rl_tasks.warmup import WarmupResult, ensure_base_checkpoint
from run_config import to_toml
from run_logging import MetricsLog, RunDir

from async_ppo.config import AsyncConfig
from async_ppo.group import GroupSpec
from async_ppo.rollout_engine import EngineSpec
from async_ppo.rollouter import RollouterSpec
from async_ppo.trainer_actor import TrainerSpec


@dataclass
class RunSetup:
    cfg: AsyncConfig
    run: RunDir
    log: MetricsLog
    base: WarmupResult
    tokenizer: CharTokenizer
    max_new_tokens: int
    max_len: int  # longest prompt + max_new_tokens: every engine's context

    @property
    def trainer_spec(self) -> TrainerSpec:
        cfg = self.cfg
        return TrainerSpec(
            checkpoint_dir=str(self.base.checkpoint_dir), train=cfg.train, algorithm=cfg.algorithm,
            temperature=cfg.rollout.temperature, seed=cfg.run.seed, torch_threads=cfg.ray.trainer_threads,
            pad_token_id=self.tokenizer.pad_id, keep_versions=cfg.pipeline.max_staleness + 1,
        )  # fmt: skip

    def rollouter_specs(self) -> list[RollouterSpec]:
        cfg, r = self.cfg, self.cfg.rollout
        group = GroupSpec(r.prompts_per_step, r.samples_per_prompt, r.temperature, self.max_new_tokens, cfg.run.seed)
        out = []
        for rid in range(cfg.ray.num_rollouters):
            engine = EngineSpec(
                kind=r.engine, checkpoint_dir=str(self.base.checkpoint_dir), max_slots=r.engine_slots,
                max_len=self.max_len, seed=cfg.run.seed + rid, torch_threads=r.torch_threads,
                compile_decode=r.compile_decode, vllm_python=r.vllm_python,
                work_dir=str(self.run.root / "engine" / f"rollouter-{rid}"),
            )  # fmt: skip
            out.append(RollouterSpec(
                rollouter_id=rid, owner_id=rid, engine=engine, group=group, task=cfg.task,
                max_inflight_prompts=(1 + cfg.pipeline.max_staleness) * r.prompts_per_step,
                partial_rollout=cfg.pipeline.partial_rollout, max_resumes=r.max_resumes,
                crash_after_groups=cfg.faults.rollouter_crash_after_groups if rid == 0 else 0,
                push_error_at_version=cfg.faults.push_error_at_version if rid == 0 else 0,
                niceness=cfg.ray.helper_niceness,
            ))  # fmt: skip
        return out


def prepare(cfg: AsyncConfig) -> RunSetup:
    run = RunDir.create(Path(cfg.run.dir).resolve())  # actors may run in another working directory
    run.config.write_text(to_toml(cfg))
    base = ensure_base_checkpoint(cfg.task, cfg.warmup, Path(cfg.run.warmup_cache).resolve())
    tokenizer = load_tokenizer(base.checkpoint_dir)
    splits = build_splits(cfg.task)
    max_new = cfg.rollout.max_new_tokens or cfg.task.max_answer_chars + 1
    longest_prompt = max(len(encode_prompt(tokenizer, ex.prompt)) for ex in (*splits.train, *splits.validation))
    return RunSetup(cfg, run, MetricsLog(run.metrics), base, tokenizer, max_new, longest_prompt + max_new)
