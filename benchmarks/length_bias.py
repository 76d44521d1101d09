"""The length bias of what async trains on: apps/sync_ppo (no bias by construction: it trains every prompt it
generates) vs apps/async_ppo on the same recipe, seed and steps, measured in one run on this machine.

Read from each run's rollout dumps (every response the trainer received) and, for async, `excluded/<step>.json`
(groups discarded as too stale under `--pipeline.staleness_policy rerun`):
- trained length: mean response tokens of the trained responses;
- excluded: the share of async's finished responses that were discarded as too stale;
- long-tail share: the share of trained responses at least as long as the sync run's 90th percentile (sync's own
  share is ~10%; an async run that starves long responses has less);
- trained/generated: mean trained length over mean generated length within one run, the selection bias alone
  (async against sync also carries the two policies' own drift in length, as they learn apart).
Also per run: samples/s (steps after the first) and the last greedy validation accuracy.
The last line is `trained length async/sync <r>  excluded <e>%  long-tail share async/sync <q>`.

Usage: `uv run python benchmarks/length_bias.py [--config configs/longtail_small_steps.toml] [--max-staleness 4]
[--steps 200] [--policy correct|rerun] [-- app flags for both]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


@dataclass(frozen=True)
class Lengths:
    kind: str
    trained: list[int]
    excluded: list[int]
    samples_per_s: float
    final_val_acc: float | None
    wall_s: float


def _read(kind: str, run_dir: Path, wall_s: float) -> Lengths:
    from async_pipeline.lengths import read_excluded, trained_lengths
    from run_lifecycle import RunDir, read_metrics

    run = RunDir(run_dir)
    steps: dict[int, dict[str, object]] = {}
    for r in read_metrics(run.metrics):
        steps.setdefault(int(r["step"]), {}).update(r)  # type: ignore[arg-type]
    steady = [s for s in sorted(steps) if s > 1]
    samples = sum(float(steps[s]["rollout/num_samples"]) for s in steady)  # type: ignore[arg-type]
    step_s = sum(float(steps[s]["timing/step_s"]) for s in steady)  # type: ignore[arg-type]
    vals = [float(steps[s]["val/greedy_acc"]) for s in sorted(steps) if "val/greedy_acc" in steps[s]]  # type: ignore[arg-type]
    excluded = [n for g in read_excluded(run) for n in g.response_lengths]
    return Lengths(kind, trained_lengths(run), excluded, samples / step_s, vals[-1] if vals else None, wall_s)


def _flags(args: argparse.Namespace, run_dir: Path) -> list[str]:
    config = ["--config", args.config] if args.config else []
    return [
        *config, "--run.steps", str(args.steps), "--run.dir", str(run_dir), "--run.progress", "false",
        "--run.plots", "false", "--run.checkpoint_every", "0", "--validation.every_steps", str(args.val_every),
        "--run.seed", str(args.seed), *args.flags,
    ]  # fmt: skip


def run_sync(args: argparse.Namespace, root: Path) -> Lengths:
    from sync_ppo.cli import parse
    from trainers.sync_ppo.trainer import train

    cfg, _ = parse(_flags(args, root / "sync"))
    t0 = time.perf_counter()
    train(cfg)
    return _read("sync", root / "sync", time.perf_counter() - t0)


def run_async(args: argparse.Namespace, root: Path) -> Lengths:
    from async_pipeline.async_ppo.pipeline import train
    from async_ppo.cli import parse

    flags = [*_flags(args, root / "async"), "--ray.temp_dir", f"/tmp/lb_{os.getpid()}"]
    if args.max_staleness is not None:
        flags += ["--pipeline.max_staleness", str(args.max_staleness)]
    if args.policy:
        flags += ["--pipeline.staleness_policy", args.policy]
    cfg, _ = parse(flags)
    t0 = time.perf_counter()
    train(cfg)
    return _read("async", root / "async", time.perf_counter() - t0)


def long_tail_share(lengths: list[int], threshold: float) -> float:
    return sum(n >= threshold for n in lengths) / max(len(lengths), 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/longtail_small_steps.toml", help="the recipe both apps run")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--val-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-staleness", type=int, default=4, help="async's pipeline.max_staleness")
    p.add_argument("--policy", choices=("correct", "rerun"), default="", help="async's pipeline.staleness_policy")
    p.add_argument("flags", nargs="*", help="app flags for both apps, after `--`")
    args = p.parse_args()
    from sync_ppo.cli import parse
    from trainers.warmup import ensure_base_checkpoint

    cfg, _ = parse([*(["--config", args.config] if args.config else []), *args.flags])
    ensure_base_checkpoint(cfg.task, cfg.warmup, Path(cfg.run.warmup_cache).resolve())  # not timed
    with tempfile.TemporaryDirectory(prefix="length_bias_") as tmp:
        s = run_sync(args, Path(tmp))
        a = run_async(args, Path(tmp))
    tail = float(np.percentile(s.trained, 90))
    for m in (s, a):
        generated = len(m.trained) + len(m.excluded)
        selection = statistics.fmean(m.trained) / statistics.fmean(m.trained + m.excluded)
        print(
            f"{m.kind:5s}: trained {len(m.trained)} responses, mean length {statistics.fmean(m.trained):.1f} "
            f"tokens, excluded {len(m.excluded)} of {generated}"
            + (f" (mean length {statistics.fmean(m.excluded):.1f})" if m.excluded else "")
            + f", trained/generated mean length {selection:.3f}"
            + f", long-tail share {long_tail_share(m.trained, tail):.1%} (>= {tail:.0f} tokens), "
            f"{m.samples_per_s:.1f} samples/s, final val acc {m.final_val_acc}, end to end {m.wall_s:.0f} s",
            flush=True,
        )
    r = statistics.fmean(a.trained) / statistics.fmean(s.trained)
    e = 100 * len(a.excluded) / (len(a.trained) + len(a.excluded))
    q = long_tail_share(a.trained, tail) / max(long_tail_share(s.trained, tail), 1e-12)
    print(f"trained length async/sync {r:.3f}  excluded {e:.1f}%  long-tail share async/sync {q:.3f}")


if __name__ == "__main__":
    main()
