"""apps/sync_ppo and apps/async_ppo against TRL's GRPOTrainer, one after the other in one run on this machine.

Same for all three: the task and reward (the default digit sorting, or `--config`'s), the starting weights (our
cached warm-up base, an HF-format Qwen3-MoE checkpoint that transformers loads as `Qwen3MoeForCausalLM`),
prompts_per_step x samples_per_prompt per optimiser step, max new tokens, temperature, AdamW settings and learning
rate, the PPO clip, no KL, no entropy bonus, group-normalised advantages and token-mean loss (TRL: `loss_type="dapo"`,
`scale_rewards="group"`, `router_aux_loss_coef=0`), and seed. TRL generates with transformers `generate` (no
vLLM on CPU) and trains in the same process, as its CPU users run it; it lives in its own environment,
`.trl-env` (the workspace's `trl` group), which this script syncs first (idempotent; the default install never
has TRL).

Reported per system: steady-state samples/s (trained samples over the wall time of steps 2..N, as
`benchmarks/async_vs_sync.py` counts them) and greedy accuracy on the whole validation split after N steps.
Ours comes from the apps' own validation (the engine, greedy); TRL's trained model is scored with
`rl_tasks.evaluate_greedy`, and the base through both paths is printed so that the two can be compared.
Last line: `samples/s sync <r1>x async <r2>x vs trl  val-acc after <n> samples: ours <a> trl <b>`, where the
ratios are ours over TRL's and `ours` is sync_ppo's accuracy (the on-policy recipe TRL's matches; async's is on
the line above). With `--seeds N` every system runs seeds `seed .. seed + N - 1` and the last line gives the mean
and the sample standard deviation over the seeds of each ratio and accuracy (`mean+-std`).

Usage: `uv run python benchmarks/vs_trl.py [--steps 20] [--seed 0] [--seeds 1] [--config configs/longtail.toml
--max-staleness 4]`
(with a recipe file, all three run its task, shape and optimiser; the trainer-only keys, such as
`backend.experts_kernel`, are ours alone).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from async_vs_sync import Measured, run_async, run_sync

ROOT = Path(__file__).resolve().parents[1]
TRL_ENV = ROOT / ".trl-env"


def build_trl_env() -> Path:
    """Syncs the `trl` group into .trl-env from uv.lock (a no-op when it is up to date); returns its python."""
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(TRL_ENV)}
    t0 = time.perf_counter()
    subprocess.run(
        ["uv", "sync", "--locked", "--no-default-groups", "--group", "trl", "--quiet"], cwd=ROOT, env=env, check=True
    )
    print(f"[vs_trl] .trl-env ready in {time.perf_counter() - t0:.1f} s", flush=True)
    return TRL_ENV / "bin" / "python"


def run_trl(python: Path, steps: int, seed: int, out: Path, config: str) -> dict[str, float]:
    """TRL's run in its own process and environment (`benchmarks/trl_grpo.py`); returns its result.json."""
    flags = ["--run.steps", str(steps), "--run.seed", str(seed), *(["--config", config] if config else [])]
    t0 = time.perf_counter()
    subprocess.run(
        [str(python), str(ROOT / "benchmarks" / "trl_grpo.py"), "--out", str(out), "--", *flags], cwd=ROOT, check=True
    )
    result = json.loads((out / "result.json").read_text())
    result["wall_s"] = time.perf_counter() - t0
    return result


def _row(name: str, samples_per_s: float, acc: float | None, wall_s: float) -> str:
    shown = "n/a" if acc is None else f"{acc:.3f}"
    return f"{name:10s} {samples_per_s:8.1f} samples/s  val acc {shown}  end to end {wall_s:6.1f} s"


@dataclass(frozen=True)
class SeedResult:
    """One seed of all three systems: samples/s and greedy validation accuracy after the same samples."""

    seed: int
    sync: Measured
    asyn: Measured
    trl: dict[str, float]


def run_seed(args: argparse.Namespace, python: Path, seed: int, tmp: Path) -> SeedResult:
    # async_vs_sync's own arguments; both apps' trainers at their default threads (sync: every core, as TRL's; async: 1)
    ours = argparse.Namespace(
        steps=args.steps,
        val_every=args.steps,
        seed=seed,
        target=2.0,
        trainer_threads=0,
        sync_threads=0,
        max_staleness=args.max_staleness,
        config=args.config,
        flags=[],
    )
    sync: Measured = run_sync(ours, tmp, seed)
    print(_row(f"sync_ppo s{seed}", sync.samples_per_s, sync.final_val_acc, sync.wall_s), flush=True)
    asyn: Measured = run_async(ours, tmp, seed)
    print(_row(f"async_ppo s{seed}", asyn.samples_per_s, asyn.final_val_acc, asyn.wall_s), flush=True)
    trl = run_trl(python, args.steps, seed, tmp / f"trl-{seed}", args.config)
    print(_row(f"trl s{seed}", trl["samples_per_s"], trl["val_acc"], trl["wall_s"]), flush=True)
    return SeedResult(seed, sync, asyn, trl)


def _spread(values: list[float], digits: int, suffix: str = "") -> str:
    """`mean` for one value, `mean+-std` (sample standard deviation) for several."""
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}{suffix}"
    return f"{mean:.{digits}f}+-{statistics.stdev(values):.{digits}f}{suffix}"


def _accuracy(m: Measured) -> float:
    if m.final_val_acc is None:
        raise ValueError("vs_trl: expected a final validation accuracy from the app's run, got none")
    return m.final_val_acc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="optimiser steps of each system")
    p.add_argument("--seed", type=int, default=0, help="the first seed")
    p.add_argument("--seeds", type=int, default=1, help="seeds per system (seed, seed + 1, ...)")
    p.add_argument("--config", default="", help="a recipe file all three run (e.g. configs/longtail.toml)")
    p.add_argument("--max-staleness", type=int, default=1, help="async_ppo's pipeline.max_staleness")
    args = p.parse_args()
    if args.steps < 2:
        raise SystemExit(f"--steps: expected >= 2 (step 1 is left out of samples/s), got {args.steps}")
    if args.seeds < 1:
        raise SystemExit(f"--seeds: expected >= 1, got {args.seeds}")
    python = build_trl_env()
    from sync_ppo.cli import parse
    from trainers.warmup import ensure_base_checkpoint

    cfg, _ = parse(["--config", args.config] if args.config else [])
    base = ensure_base_checkpoint(cfg.task, cfg.warmup, Path(cfg.run.warmup_cache).resolve())
    n = args.steps * cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt
    with tempfile.TemporaryDirectory(prefix="vs_trl_") as tmp:
        runs = [run_seed(args, python, seed, Path(tmp)) for seed in range(args.seed, args.seed + args.seeds)]
    print(
        f"base (warm-up) greedy val acc: {base.val_accuracy:.3f} (warm-up), {runs[0].trl['base_acc']:.3f} "
        "(evaluate_greedy)"
    )
    print(f"async_ppo val acc after {n} samples: {_spread([_accuracy(r.asyn) for r in runs], 3)}")
    sync_x = [r.sync.samples_per_s / r.trl["samples_per_s"] for r in runs]
    async_x = [r.asyn.samples_per_s / r.trl["samples_per_s"] for r in runs]
    seeds = f" ({len(runs)} seeds, mean+-std)" if len(runs) > 1 else ""
    ours, trl = _spread([_accuracy(r.sync) for r in runs], 3), _spread([r.trl["val_acc"] for r in runs], 3)
    print(
        f"samples/s sync {_spread(sync_x, 2, 'x')} async {_spread(async_x, 2, 'x')} vs trl  val-acc after {n} samples: "
        f"ours {ours} trl {trl}{seeds}"
    )


if __name__ == "__main__":
    main()
