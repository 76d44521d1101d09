"""FlowGRPO: the advantage's std over the whole batch (`global`, the Flow-GRPO reference's choice) against the std
of each group (`group`), measured in one run on this machine (apps/flow_grpo, in-process rollouter).

Both modes run the app's defaults with the same seeds and budget (`--steps` steps of 16 classes x 8 images), once
per seed; the base model and the reward classifier come from the app's cache (built first if missing, not timed).
Validation (fixed-seed ODE sampler, every `--val-every` steps) gives each run's reward curve. The PNG
(`--png`, default `runs/benchmarks/flow_grpo_std.png`) shows both modes' curves, per seed (thin) and their mean
(thick).

The last line is `std group <final> vs global <final> (<steps> steps, <seeds> seeds)`: the mean over seeds of the
final validation reward (classifier probability of the requested class, in percent), with the spread over seeds.

Usage: `uv run python benchmarks/flow_grpo_std.py [--steps 60] [--seeds 3] [--val-every 10]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

MODES = ("group", "global")


def _curve(args: argparse.Namespace, run_dir: Path, mode: str, seed: int) -> tuple[list[int], list[float]]:
    from flow_grpo.cli import parse
    from flow_grpo.setup import train
    from run_lifecycle import read_metrics

    cfg, _ = parse(["--run.steps", str(args.steps), "--run.seed", str(seed), "--run.dir", str(run_dir),
                    "--algorithm.std_mode", mode, "--validation.every_steps", str(args.val_every),
                    "--pipeline.ray", "false", "--run.progress", "false", "--run.plots", "false",
                    "--run.checkpoint_every", "0"])  # fmt: skip
    train(cfg)
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "val/reward/mean" in r]
    return [int(r["step"]) for r in rows], [float(r["val/reward/mean"]) for r in rows]  # type: ignore[call-overload]


def _plot(curves: dict[str, list[tuple[list[int], list[float]]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, color in zip(MODES, ("tab:blue", "tab:orange"), strict=True):
        for steps, values in curves[mode]:
            ax.plot(steps, values, color=color, alpha=0.3, linewidth=1)
        steps = curves[mode][0][0]
        mean = [statistics.fmean(v[i] for _, v in curves[mode]) for i in range(len(steps))]
        ax.plot(steps, mean, color=color, linewidth=2.5, label=f"std {mode} (mean of {len(curves[mode])} seeds)")
    ax.set_xlabel("step")
    ax.set_ylabel("validation reward (classifier probability)")
    ax.set_title("FlowGRPO advantage std: per group vs whole batch")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--val-every", type=int, default=10)
    p.add_argument("--png", type=Path, default=Path("runs/benchmarks/flow_grpo_std.png"))
    args = p.parse_args()
    curves: dict[str, list[tuple[list[int], list[float]]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="flow_grpo_std_") as tmp:
        for seed in range(args.seeds):
            for mode in MODES:
                t0 = time.perf_counter()
                steps, values = _curve(args, Path(tmp) / f"{mode}-{seed}", mode, seed)
                points = "  ".join(f"{s}:{100 * v:.1f}" for s, v in zip(steps, values, strict=True))
                print(
                    f"std {mode:6s} seed {seed}  step:val-reward%  {points}  ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
                curves[mode].append((steps, values))
    _plot(curves, args.png)
    print(f"wrote {args.png}")
    finals = {m: [100 * v[-1] for _, v in curves[m]] for m in MODES}

    def fmt(m: str) -> str:
        spread = f" +- {statistics.stdev(finals[m]):.1f}" if len(finals[m]) > 1 else ""
        return f"{statistics.fmean(finals[m]):.1f}{spread}"

    print(f"std group {fmt('group')} vs global {fmt('global')} ({args.steps} steps, {args.seeds} seeds)")


if __name__ == "__main__":
    main()
