"""Command line: `uv run apps/sync_ppo [--config file.toml] [--section.key value ...] [--resume]`.

Only the standard library, run_config and the config dataclasses are imported before the arguments are parsed,
so `--help` answers in well under a second; torch comes with `sync_ppo.trainer`.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path
from typing import TypeVar

from run_config import add_arguments, resolve

from sync_ppo.config import AppConfig

DEFAULT_RUNS_ROOT = Path("runs") / "sync_ppo"
CONFIG_FILE = "config.toml"
C = TypeVar("C")

DESCRIPTION = """\
Synchronous PPO/GRPO for a tiny Mixture-of-Experts LM on a verifiable toy task, with router replay.
Each step: generate (native engine) -> reward -> advantages -> PPO update -> push weights -> validate -> dumps.
Settings: defaults < --config FILE (TOML) < --section.key value. Artifacts go to the run directory
(metrics.jsonl, config.toml, rollouts/, validation/, checkpoints/, plots/)."""


def app_parser(prog: str, description: str, config_cls: type, runs_root: Path) -> argparse.ArgumentParser:
    """`--resume` plus one `--section.key` flag per config leaf (shared by the sync and async apps)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--resume", action="store_true",
        help=f"continue the run in --run.dir (default: the newest under {runs_root}) from its latest complete "
        "checkpoint, with its saved config.toml as the base of the settings",
    )  # fmt: skip
    add_arguments(parser, config_cls)
    return parser


def newest_run(root: Path = DEFAULT_RUNS_ROOT) -> Path:
    runs = sorted(p for p in root.glob("*") if (p / CONFIG_FILE).is_file()) if root.is_dir() else []
    if not runs:
        raise ValueError(f"--resume: expected a run directory with {CONFIG_FILE} under {root}, got none")
    return runs[-1]


def resolve_run(config_cls: type[C], args: argparse.Namespace, runs_root: Path) -> tuple[C, bool]:
    """The resolved config and whether to resume. A new run without --run.dir gets `<runs_root>/<UTC stamp>`. On
    resume the run's saved config is the base of the settings (an explicit --config replaces it) and the run
    directory is pinned."""
    cfg = resolve(config_cls, args)
    if not args.resume:
        if not cfg.run.dir:  # type: ignore[attr-defined]
            stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
            cfg.run.dir = str(runs_root / stamp)  # type: ignore[attr-defined]
        return cfg, False
    run_dir = Path(cfg.run.dir) if cfg.run.dir else newest_run(runs_root)  # type: ignore[attr-defined]
    if args.config is None:
        saved = run_dir / CONFIG_FILE
        if not saved.is_file():
            raise ValueError(f"--resume: expected {saved}, got no such file")
        args.config = saved
    cfg = resolve(config_cls, args)
    cfg.run.dir = str(run_dir)  # type: ignore[attr-defined]
    return cfg, True


def parse(argv: list[str] | None = None) -> tuple[AppConfig, bool]:
    """The resolved config and whether to resume (see `resolve_run`)."""
    args = app_parser("sync_ppo", DESCRIPTION, AppConfig, DEFAULT_RUNS_ROOT).parse_args(argv)
    return resolve_run(AppConfig, args, DEFAULT_RUNS_ROOT)


def main(argv: list[str] | None = None) -> None:
    try:
        cfg, resume = parse(argv)
    except ValueError as exc:
        print(f"sync_ppo: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    from sync_ppo.trainer import train

    summary = train(cfg, resume=resume)
    print(summary.line())
