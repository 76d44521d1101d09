"""Command line: `uv run apps/sync_ppo [--config file.toml] [--section.key value ...] [--resume]`.

Only the standard library, run_config and the config dataclasses are imported before the arguments are parsed,
so `--help` answers in well under a second; torch comes with `sync_ppo.trainer`.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from run_config import add_arguments, resolve

from sync_ppo.config import AppConfig

DEFAULT_RUNS_ROOT = Path("runs") / "sync_ppo"
CONFIG_FILE = "config.toml"

DESCRIPTION = """\
Synchronous PPO/GRPO for a tiny Mixture-of-Experts LM on a verifiable toy task, with router replay.
Each step: generate (native engine) -> reward -> advantages -> PPO update -> push weights -> validate -> dumps.
Settings: defaults < --config FILE (TOML) < --section.key value. Artifacts go to the run directory
(metrics.jsonl, config.toml, rollouts/, validation/, checkpoints/, plots/)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sync_ppo", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--resume", action="store_true",
        help="continue the run in --run.dir (default: the newest under runs/sync_ppo) from its latest complete "
        "checkpoint, with its saved config.toml as the base of the settings",
    )  # fmt: skip
    add_arguments(parser, AppConfig)
    return parser


def newest_run(root: Path = DEFAULT_RUNS_ROOT) -> Path:
    runs = sorted(p for p in root.glob("*") if (p / CONFIG_FILE).is_file()) if root.is_dir() else []
    if not runs:
        raise ValueError(f"--resume: expected a run directory with {CONFIG_FILE} under {root}, got none")
    return runs[-1]


def parse(argv: list[str] | None = None) -> tuple[AppConfig, bool]:
    """The resolved config and whether to resume. On resume the run's saved config is the base of the
    settings (an explicit --config replaces it) and the run directory is pinned."""
    args = _parser().parse_args(argv)
    cfg = resolve(AppConfig, args)
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
    cfg = resolve(AppConfig, args)
    cfg.run.dir = str(run_dir)
    return cfg, True


def main(argv: list[str] | None = None) -> None:
    try:
        cfg, resume = parse(argv)
    except ValueError as exc:
        print(f"sync_ppo: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    from sync_ppo.trainer import train

    summary = train(cfg, resume=resume)
    print(summary.line())
