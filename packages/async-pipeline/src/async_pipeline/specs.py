"""The specs of a run's actors, from the run's shared sections, the pipeline's own and what
`trainers.recipe.setup.prepare_run` prepared (run directory, base checkpoint, tokenizer, lengths). The warm-up base is
built (or read from its cache) by the driver, once, so every actor loads the same folder."""

from __future__ import annotations

from trainers.recipe.setup import RunSetup
from trainers.rollout.engine_site import EngineSite
from trainers.rollout.requests import GroupSpec

from async_pipeline.config import FaultConfig, PipelineConfig
from async_pipeline.ray_session.config import RayConfig
from async_pipeline.rollouter import RollouterSpec
from async_pipeline.trainer_actor import TrainerSpec

MIB = 1 << 20


def trainer_spec(s: RunSetup, pipeline: PipelineConfig) -> TrainerSpec:
    return TrainerSpec(
        cfg=s.cfg,
        checkpoint_dir=s.checkpoint_dir,
        run_dir=str(s.run.root),
        pad_token_id=s.pad_id,
        vocab_size=s.vocab_size,
        max_new_tokens=s.max_new_tokens,
        keep_versions=pipeline.max_staleness + 1,
        bucket_bytes=int(pipeline.bucket_mb * MIB),
        max_staleness=pipeline.max_staleness,
        stale_is_cap=pipeline.stale_is_cap if pipeline.staleness_policy == "correct" else None,
    )


def rollouter_specs(s: RunSetup, pipeline: PipelineConfig, ray: RayConfig, faults: FaultConfig) -> list[RollouterSpec]:
    """One spec per rollouter (`ray.num_rollouters`); the injected faults apply to rollouter 0 only."""
    cfg, r = s.cfg, s.cfg.rollout
    group = GroupSpec(r.prompts_per_step, r.samples_per_prompt, r.temperature, s.max_new_tokens, cfg.run.seed)
    out = []
    for rid in range(ray.num_rollouters):
        work_dir = str(s.run.root / "engine" / f"rollouter-{rid}")
        site = EngineSite(
            s.checkpoint_dir,
            s.max_len,
            cfg.run.seed + rid,
            work_dir,
            index=rid,
            true_on_policy=cfg.numerics.true_on_policy,
            cpu_threads=ray.rollouter_threads,
            vocab_size=s.vocab_size,
        )
        out.append(
            RollouterSpec(
                rollouter_id=rid,
                owner_id=rid,
                site=site,
                rollout=r,
                group=group,
                task=cfg.task,
                model=cfg.model,
                max_inflight_prompts=(1 + pipeline.max_staleness) * r.prompts_per_step,
                partial_rollout=pipeline.partial_rollout,
                torch_threads=ray.rollouter_threads,
                crash_after_groups=faults.rollouter_crash_after_groups if rid == 0 else 0,
                push_error_at_version=faults.push_error_at_version if rid == 0 else 0,
                niceness=ray.helper_niceness,
            )
        )
    return out
