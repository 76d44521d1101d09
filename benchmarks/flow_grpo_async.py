"""FlowGRPO synchronous (`--pipeline.max_staleness 0`) against asynchronous (`k >= 1`: the rollouter actor samples
the next batches while the trainer updates), both on Ray, one after the other in one process, same seed and steps.

Throughput is trained images per second of the training loop (`timing/step_s` summed over the steps after the
first, which waits for the actor to start); the reward is the final validation reward (fixed-seed ODE sampler).
The last line is `async k=<k> <ratio>x images/s vs sync  val reward <async> vs <sync>` (rewards in percent).

Usage: `uv run python benchmarks/flow_grpo_async.py [--steps 150] [--staleness 1]`
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def _run(args: argparse.Namespace, run_dir: Path, staleness: int) -> tuple[float, float]:
    """(images per second of the steps, final validation reward)."""
    from flow_grpo.cli import parse
    from flow_grpo.setup import train
    from run_lifecycle import read_metrics

    cfg, _ = parse(["--run.steps", str(args.steps), "--run.dir", str(run_dir), "--run.progress", "false",
                    "--run.plots", "false", "--pipeline.max_staleness", str(staleness),
                    "--ray.temp_dir", f"/tmp/flow_grpo_bench_{staleness}"])  # fmt: skip
    summary = train(cfg)
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if int(r["step"]) > 1]  # type: ignore[call-overload]
    seconds = sum(float(r["timing/step_s"]) for r in rows)  # type: ignore[arg-type]
    images = sum(float(r["rollout/images"]) for r in rows)  # type: ignore[arg-type]
    assert summary.final is not None
    return images / seconds, summary.final


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--staleness", type=int, default=1)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="flow_grpo_async_") as tmp:
        sync = _run(args, Path(tmp) / "sync", 0)
        print(f"sync:        {sync[0]:.0f} images/s, val reward {100 * sync[1]:.1f}%", flush=True)
        run = _run(args, Path(tmp) / "async", args.staleness)
        print(f"async k={args.staleness}:   {run[0]:.0f} images/s, val reward {100 * run[1]:.1f}%", flush=True)
    print(
        f"async k={args.staleness} {run[0] / sync[0]:.2f}x images/s vs sync  val reward {100 * run[1]:.1f} vs "
        f"{100 * sync[1]:.1f}"
    )


if __name__ == "__main__":
    main()
