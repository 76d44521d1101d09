"""apps/async_ppo vs apps/sync_ppo on the default task (or a recipe file's, `--config`), measured in one run on
this machine.

Both run the same recipe (task, warm-up base, prompts_per_step x samples_per_prompt, optimiser, seed) for
`--steps` steps, one after the other (`--order` chooses which goes first; `--reps` alternates). Reported per run:
- samples/s: trained samples / wall time of the training steps (steady state: step 1, which pays for startup,
  is left out); the step time of sync is generate + train + push, of async the trainer's wait + train + push;
- time to target: wall time from the start of step 1 to the end of the first step whose validation reaches
  `--target` greedy accuracy (validation every `--val-every` steps; async validates on its own engine, so its
  result is credited to the step it validated);
- end to end: the whole run including startup (Ray and actors for async; the warm-up base is cached first);
- async only: the share of trained samples whose tokens span two or more weight versions.
The last line is `samples/s <async/sync>x  time-to-target <sync/async>x  (<target>)`.

Usage: `uv run python benchmarks/async_vs_sync.py [--steps 30] [--target 0.6] [--reps 1] [--trainer-threads 1]
[--sync-threads 1] [--config configs/longtail.toml --max-staleness 4] [-- app flags for both]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


@dataclass(frozen=True)
class Measured:
    kind: str
    samples_per_s: float
    time_to_target_s: float | None
    final_val_acc: float | None
    wall_s: float
    multi_version_frac: float | None  # async: share of trained samples whose tokens span >= 2 weight versions


def _measure(kind: str, run_dir: Path, target: float, wall_s: float) -> Measured:
    from run_lifecycle import read_metrics

    rows = read_metrics(run_dir / "metrics.jsonl")
    steps: dict[int, dict[str, object]] = {}
    for r in rows:
        steps.setdefault(int(r["step"]), {}).update(r)  # type: ignore[arg-type]
    trained = [s for s in sorted(steps) if s > 0]
    step_s = {s: float(steps[s]["timing/step_s"]) for s in trained}  # type: ignore[arg-type]
    steady = trained[1:]
    samples = sum(float(steps[s]["rollout/num_samples"]) for s in steady)  # type: ignore[arg-type]
    reached = [s for s in trained if float(steps[s].get("val/greedy_acc", -1.0)) >= target]  # type: ignore[arg-type]
    to_target = sum(step_s[s] for s in trained if s <= reached[0]) if reached else None
    finals = [float(steps[s]["val/greedy_acc"]) for s in trained if "val/greedy_acc" in steps[s]]  # type: ignore[arg-type]
    spans = [
        (float(steps[s]["staleness/multi_version_frac"]), float(steps[s]["rollout/num_samples"]))  # type: ignore[arg-type]
        for s in trained
        if "staleness/multi_version_frac" in steps[s]
    ]
    multi = sum(f * n for f, n in spans) / sum(n for _, n in spans) if spans else None
    return Measured(
        kind, samples / sum(step_s[s] for s in steady), to_target, finals[-1] if finals else None, wall_s, multi
    )


def _flags(args: argparse.Namespace, run_dir: Path) -> list[str]:
    return ["--run.steps", str(args.steps), "--run.dir", str(run_dir), "--run.progress", "false",
            "--run.plots", "false", "--run.checkpoint_every", "0", "--validation.every_steps", str(args.val_every),
            "--run.seed", str(args.seed), *(["--config", args.config] if args.config else []),
            *args.flags]  # fmt: skip


def run_sync(args: argparse.Namespace, root: Path, rep: int) -> Measured:
    from sync_ppo.cli import parse
    from trainers.sync_ppo.trainer import train

    cfg, _ = parse([*_flags(args, root / f"sync-{rep}"), "--run.torch_threads", str(args.sync_threads)])
    t0 = time.perf_counter()
    train(cfg)
    return _measure("sync", root / f"sync-{rep}", args.target, time.perf_counter() - t0)


def run_async(args: argparse.Namespace, root: Path, rep: int) -> Measured:
    from async_pipeline.async_ppo.pipeline import train
    from async_ppo.cli import parse

    flags = [*_flags(args, root / f"async-{rep}"), "--run.torch_threads", str(args.trainer_threads),
             *([] if args.max_staleness is None else ["--pipeline.max_staleness", str(args.max_staleness)]),
             "--ray.temp_dir", f"/tmp/avs_{os.getpid()}_{rep}"]  # fmt: skip
    cfg, _ = parse(flags)
    t0 = time.perf_counter()
    train(cfg)
    return _measure("async", root / f"async-{rep}", args.target, time.perf_counter() - t0)


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--val-every", type=int, default=5)
    p.add_argument("--target", type=float, default=0.6, help="greedy validation accuracy to reach")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--order", choices=("sync-first", "async-first"), default="sync-first")
    p.add_argument("--trainer-threads", type=int, default=1, help="async trainer's torch threads")
    p.add_argument(
        "--sync-threads",
        type=int,
        default=1,
        help="sync trainer's torch threads (1: as the figures in docs/ were measured; 0: the app's default, every "
        "core, which sync has to itself while it trains: the fairer baseline on a compute-bound step)",
    )
    p.add_argument(
        "--max-staleness", type=int, default=None, help="async's pipeline.max_staleness (default: the config's)"
    )
    p.add_argument("--config", default="", help="a recipe file both apps run (e.g. configs/longtail.toml)")
    p.add_argument(
        "flags", nargs="*", help="app flags for both apps, after `--` (e.g. -- --rollout.samples_per_prompt 8)"
    )
    args = p.parse_args()
    from sync_ppo.cli import parse
    from trainers.warmup import ensure_base_checkpoint

    cfg, _ = parse([*(["--config", args.config] if args.config else []), *args.flags])
    ensure_base_checkpoint(cfg.task, cfg.warmup, Path(cfg.run.warmup_cache).resolve())  # not timed
    results: list[tuple[Measured, Measured]] = []
    with tempfile.TemporaryDirectory(prefix="async_vs_sync_") as tmp:
        for rep in range(args.reps):
            first_sync = (args.order == "sync-first") == (rep % 2 == 0)
            if first_sync:
                s = run_sync(args, Path(tmp), rep)
                a = run_async(args, Path(tmp), rep)
            else:
                a = run_async(args, Path(tmp), rep)
                s = run_sync(args, Path(tmp), rep)
            results.append((s, a))
            for m in (s, a):
                print(
                    f"rep {rep} {m.kind:5s}: {m.samples_per_s:7.1f} samples/s  time to {args.target:.2f}: "
                    f"{_fmt(m.time_to_target_s, '6.1f')} s  final val acc {_fmt(m.final_val_acc, '.3f')}  "
                    f"end to end {m.wall_s:6.1f} s"
                    + ("" if m.multi_version_frac is None else f"  multi-version samples {m.multi_version_frac:.1%}"),
                    flush=True,
                )
    speed = statistics.median(a.samples_per_s / s.samples_per_s for s, a in results)
    ttt = [s.time_to_target_s / a.time_to_target_s for s, a in results if s.time_to_target_s and a.time_to_target_s]
    print(
        f"samples/s {speed:.2f}x  time-to-target {_fmt(statistics.median(ttt) if ttt else None, '.2f')}x  "
        f"({args.target:.2f})"
    )


if __name__ == "__main__":
    main()
