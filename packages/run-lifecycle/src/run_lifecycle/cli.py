"""The command line both trainer apps share: `--resume` plus one `--section.key` flag per config leaf, resolved
defaults < `--config FILE` (TOML) < flags. Standard library and run_lifecycle only, so `--help` is instant."""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from run_lifecycle import RunDir, add_arguments, from_dict, resolve
from run_lifecycle.resume import DATA_SHAPING, check_resume
from run_lifecycle.sigterm import exit_on_sigterm

CONFIG_FILE = "config.toml"
DATA_SETTINGS = "seed, task, warm-up, prompts_per_step, samples_per_prompt, max_new_tokens, temperature"
C = TypeVar("C")


def app_parser(
    prog: str, description: str, config_cls: type, runs_root: Path, data_settings: str = DATA_SETTINGS
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help=f"continue the run in --run.dir (default: the newest under {runs_root}) from its latest complete "
        "checkpoint, with its saved config.toml as the base of the settings",
    )
    parser.add_argument(
        "--allow-changed-data",
        action="store_true",
        help=f"with --resume: accept changes of the settings that decide the run's data ({data_settings}); they are "
        "refused otherwise",
    )
    add_arguments(parser, config_cls)
    return parser


def newest_run(root: Path) -> Path:
    runs = sorted(p for p in root.glob("*") if (p / CONFIG_FILE).is_file()) if root.is_dir() else []
    if not runs:
        raise ValueError(f"--resume: expected a run directory with {CONFIG_FILE} under {root}, got none")
    return runs[-1]


def resolve_run(
    config_cls: type[C], args: argparse.Namespace, runs_root: Path, shaping_keys: tuple[str, ...] = DATA_SHAPING
) -> tuple[C, bool]:
    """The resolved config and whether to resume; every setting is checked here, before anything is built.

    A new run keeps `run.dir` empty when none is given (the run allocates `<runs_root>/<UTC stamp>` when it starts,
    `trainers.recipe.setup.prepare_run`); a given one must not hold a run already. On resume the run's saved config is
    the base of the settings (an explicit --config replaces it), the run directory is pinned, the settings that decide
    the run's data must not change (unless `--allow-changed-data`) and `run.steps` must exceed the latest
    checkpoint's step."""
    cfg = resolve(config_cls, args)
    if not args.resume:
        if args.allow_changed_data:
            raise ValueError("--allow-changed-data: expected it with --resume, got a new run")
        given = Path(cfg.run.dir) if cfg.run.dir else None  # type: ignore[attr-defined]
        if given is not None and (given / CONFIG_FILE).exists():
            raise ValueError(
                f"--run.dir {given}: expected a directory without a run, got one holding {CONFIG_FILE}; pass --resume "
                "to continue that run, or choose another --run.dir"
            )
        return cfg, False
    run_dir = Path(cfg.run.dir) if cfg.run.dir else newest_run(runs_root)  # type: ignore[attr-defined]
    saved_file = run_dir / CONFIG_FILE
    if not saved_file.is_file():
        raise ValueError(f"--resume: expected {saved_file}, got no such file")
    saved = from_dict(config_cls, tomllib.loads(saved_file.read_text()), source=str(saved_file))
    if args.config is None:
        args.config = saved_file
    cfg = resolve(config_cls, args)
    cfg.run.dir = str(run_dir)  # type: ignore[attr-defined]
    latest = RunDir(run_dir).latest_checkpoint()
    check_resume(
        saved,
        cfg,
        None if latest is None else int(latest.name),
        allow_changed_data=args.allow_changed_data,
        shaping_keys=shaping_keys,
    )
    return cfg, True


def run_app(
    prog: str,
    parse: Callable[[list[str] | None], tuple[C, bool]],
    argv: list[str] | None,
    check: Callable[[C], object] | None = None,
) -> tuple[C, bool]:
    """`parse(argv)`, then `check(config)` (the checks that read the task's data, the tokenizer and the checkpoint's
    config before anything is built), with a bad setting reported as `<prog>: error: ...` and exit status 2 (no
    traceback, nothing written). From here on SIGTERM ends the app as Ctrl-C does (exit status 143): its cleanup
    (`finally` blocks: the run directory's lock, a local Ray and its temp dir, engine servers) runs instead of
    being skipped."""
    try:
        parsed = parse(argv)
        if check is not None:
            check(parsed[0])
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    exit_on_sigterm()
    return parsed
