"""Command line: `uv run apps/sync_ppo [--config file.toml] [--section.key value ...] [--resume]`.

Only the standard library, run_lifecycle and the config dataclasses are imported before the arguments are parsed,
so `--help` answers in well under a second; torch comes with `trainers.sync_ppo.trainer`.
"""

from __future__ import annotations

from run_lifecycle.cli import app_parser, resolve_run, run_app
from trainers.sync_ppo.config import SyncConfig

DESCRIPTION = """\
Synchronous PPO/GRPO for a tiny Mixture-of-Experts LM on a verifiable task, with router replay.
Each step: generate (rollout engine) -> reward -> update (algorithm.kind on backend.kind) -> push weights
-> validate -> dumps. Settings: defaults < --config FILE (TOML) < --section.key value; a tagged section
(algorithm, backend, rollout.engine, task) is chosen with --<section>.kind (or --<section> KIND) and shows
each kind's keys below. Artifacts go to the run directory (metrics.jsonl, config.toml, rollouts/,
validation/, checkpoints/, plots/)."""


def parse(argv: list[str] | None = None) -> tuple[SyncConfig, bool]:
    """The resolved config and whether to resume (see `run_lifecycle.cli.resolve_run`)."""
    args = app_parser("sync_ppo", DESCRIPTION, SyncConfig, SyncConfig.RUNS_ROOT).parse_args(argv)
    return resolve_run(SyncConfig, args, SyncConfig.RUNS_ROOT)


def check(cfg: SyncConfig) -> None:
    """The run's checks that read its data, tokenizer and checkpoint (`trainers.recipe.setup.check_run`): exit 2 on a
    bad one, before anything is built."""
    from trainers.recipe.setup import check_run

    check_run(cfg)


def main(argv: list[str] | None = None) -> None:
    cfg, resume = run_app("sync_ppo", parse, argv, check)
    from trainers.sync_ppo.trainer import train

    summary = train(cfg, resume=resume)
    print(summary.line())
