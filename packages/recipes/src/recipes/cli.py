"""The command line both trainer apps share: `--resume` plus one `--section.key` flag per config leaf, resolved
defaults < `--config FILE` (TOML) < flags. Standard library and run_config only, so `--help` is instant."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from run_config import add_arguments, resolve

CONFIG_FILE = "config.toml"
C = TypeVar("C")


def app_parser(prog: str, description: str, config_cls: type, runs_root: Path) -> argparse.ArgumentParser:
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


def newest_run(root: Path) -> Path:
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


def run_app(prog: str, parse: Callable[[list[str] | None], tuple[C, bool]], argv: list[str] | None) -> tuple[C, bool]:
    """`parse(argv)`, with a bad setting reported as `<prog>: error: ...` and exit status 2 (no traceback)."""
    try:
        return parse(argv)
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
