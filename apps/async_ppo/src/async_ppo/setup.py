"""The specs of a run's actors, from its config and what `recipes.setup.prepare_run` prepared (run directory, base
checkpoint, tokenizer, lengths). The warm-up base is built (or read from its cache) by the driver, once, so every
actor loads the same folder."""

from __future__ import annotations

from recipes.engine_config import EngineSite
from recipes.requests import GroupSpec
from recipes.setup import RunSetup
from rl_pipeline.rollouter import RollouterSpec
from rl_pipeline.trainer_actor import TrainerSpec

from async_ppo.config import AsyncConfig

MIB = 1 << 20


def trainer_spec(s: RunSetup) -> TrainerSpec:
    cfg: AsyncConfig = s.cfg  # type: ignore[assignment]
    return TrainerSpec(
        cfg=cfg,
        checkpoint_dir=s.checkpoint_dir,
        run_dir=str(s.run.root),
        pad_token_id=s.tokenizer.pad_id,
        max_new_tokens=s.max_new_tokens,
        keep_versions=cfg.pipeline.max_staleness + 1,
        bucket_bytes=int(cfg.pipeline.bucket_mb * MIB),
        max_staleness=cfg.pipeline.max_staleness,
        stale_is_cap=cfg.pipeline.stale_is_cap if cfg.pipeline.staleness_policy == "correct" else None,
    )


def rollouter_specs(s: RunSetup) -> list[RollouterSpec]:
    cfg: AsyncConfig = s.cfg  # type: ignore[assignment]
    r = cfg.rollout
    group = GroupSpec(r.prompts_per_step, r.samples_per_prompt, r.temperature, s.max_new_tokens, cfg.run.seed)
    out = []
    for rid in range(cfg.ray.num_rollouters):
        work_dir = str(s.run.root / "engine" / f"rollouter-{rid}")
        site = EngineSite(
            s.checkpoint_dir,
            s.max_len,
            cfg.run.seed + rid,
            work_dir,
            index=rid,
            true_on_policy=cfg.numerics.true_on_policy,
            cpu_threads=cfg.ray.rollouter_threads,
        )
        out.append(
            RollouterSpec(
                rollouter_id=rid,
                owner_id=rid,
                site=site,
                rollout=r,
                group=group,
                task=cfg.task,
                max_inflight_prompts=(1 + cfg.pipeline.max_staleness) * r.prompts_per_step,
                partial_rollout=cfg.pipeline.partial_rollout,
                torch_threads=cfg.ray.rollouter_threads,
                crash_after_groups=cfg.faults.rollouter_crash_after_groups if rid == 0 else 0,
                push_error_at_version=cfg.faults.push_error_at_version if rid == 0 else 0,
                niceness=cfg.ray.helper_niceness,
            )
        )
    return out
