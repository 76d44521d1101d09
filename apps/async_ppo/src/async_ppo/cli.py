"""Command line: `uv run apps/async_ppo [--config file.toml] [--section.key value ...] [--resume]`.

Only the standard library, run_config and the config dataclasses are imported before the arguments are parsed,
so `--help` answers in well under a second; torch and ray come with `async_ppo.pipeline`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

from run_config import add_arguments, resolve

from async_ppo.config import AsyncConfig

DEFAULT_RUNS_ROOT = Path("runs") / "async_ppo"
CONFIG_FILE = "config.toml"

DESCRIPTION = """\
Fully asynchronous PPO/GRPO for a tiny Mixture-of-Experts LM on a verifiable toy task, on Ray.
Rollouter actors generate GRPO groups continuously (partial rollout, per-token weight versions, routed experts);
the trainer actor takes prompts_per_step complete groups per step (none older than pipeline.max_staleness
versions), updates with router replay and pushes weights to the rollouters (pause keep | abort). Checkpoints
hold the trainer state and every unfinished prompt; --resume trains each prompt exactly once.
Settings: defaults < --config FILE (TOML) < --section.key value. Artifacts go to the run directory
(metrics.jsonl, config.toml, rollouts/, validation/, checkpoints/, plots/)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="async_ppo", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--resume", action="store_true",
        help="continue the run in --run.dir (default: the newest under runs/async_ppo) from its latest complete "
        "checkpoint, with its saved config.toml as the base of the settings",
    )  # fmt: skip
    add_arguments(parser, AsyncConfig)
    return parser


def newest_run(root: Path = DEFAULT_RUNS_ROOT) -> Path:
    runs = sorted(p for p in root.glob("*") if (p / CONFIG_FILE).is_file()) if root.is_dir() else []
    if not runs:
        raise ValueError(f"--resume: expected a run directory with {CONFIG_FILE} under {root}, got none")
    return runs[-1]


def parse(argv: list[str] | None = None) -> tuple[AsyncConfig, bool]:
    """The resolved config and whether to resume (the run's saved config is then the base of the settings)."""
    args = _parser().parse_args(argv)
    cfg = resolve(AsyncConfig, args)
    if not args.resume:
        if not cfg.run.dir:
            stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
            cfg.run.dir = str(DEFAULT_RUNS_ROOT / stamp)
        return cfg, False
    run_dir = Path(cfg.run.dir) if cfg.run.dir else newest_run()
    if args.config is None:
        saved = run_dir / CONFIG_FILE
        if not saved.is_file():
            raise ValueError(f"--resume: expected {saved}, got no such file")
        args.config = saved
    cfg = resolve(AsyncConfig, args)
    cfg.run.dir = str(run_dir)
    return cfg, True


def main(argv: list[str] | None = None) -> None:
    try:
        cfg, resume = parse(argv)
    except ValueError as exc:
        print(f"async_ppo: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # before ray is imported: workers reuse this venv
    from async_ppo.pipeline import train

    summary = train(cfg, resume=resume)
    print(summary.line())
