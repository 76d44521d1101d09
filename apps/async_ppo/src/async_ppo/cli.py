"""Command line: `uv run apps/async_ppo [--config file.toml] [--section.key value ...] [--resume]`.

Only the standard library, run_lifecycle and the config dataclasses are imported before the arguments are parsed,
so `--help` answers in well under a second; torch and ray come with `async_pipeline.async_ppo.pipeline`.
"""

from __future__ import annotations

import os

from async_pipeline.async_ppo.config import AsyncConfig
from run_lifecycle.cli import app_parser, resolve_run, run_app

DESCRIPTION = """\
Fully asynchronous PPO/GRPO for a tiny Mixture-of-Experts LM on a verifiable task, on Ray.
Rollouter actors generate groups continuously (partial rollout, per-token weight versions, routed experts);
the trainer actor takes prompts_per_step complete groups per step (none older than pipeline.max_staleness
versions), updates (algorithm.kind on backend.kind, router replay) and the driver pushes the weights to the
rollouters (pause keep | abort). Checkpoints hold the trainer state and every unfinished prompt; --resume
trains each prompt exactly once. Settings: defaults < --config FILE (TOML) < --section.key value; a tagged
section (algorithm, backend, rollout.engine, task) is chosen with --<section>.kind (or --<section> KIND).
Artifacts go to the run directory (metrics.jsonl, config.toml, rollouts/, validation/, checkpoints/, plots/)."""


def parse(argv: list[str] | None = None) -> tuple[AsyncConfig, bool]:
    """The resolved config and whether to resume (`run_lifecycle.cli.resolve_run`: the saved config is the base)."""
    args = app_parser("async_ppo", DESCRIPTION, AsyncConfig, AsyncConfig.RUNS_ROOT).parse_args(argv)
    return resolve_run(AsyncConfig, args, AsyncConfig.RUNS_ROOT)


def check(cfg: AsyncConfig) -> None:
    """The run's checks that read its data, tokenizer and checkpoint (`trainers.recipe.setup.check_run`): exit 2 on a
    bad one, before anything is built."""
    from trainers.recipe.setup import check_run

    check_run(cfg)


def main(argv: list[str] | None = None) -> None:
    cfg, resume = run_app("async_ppo", parse, argv, check)
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # before ray is imported: workers reuse this venv
    from async_pipeline.async_ppo.pipeline import train

    summary = train(cfg, resume=resume)
    print(summary.line())
