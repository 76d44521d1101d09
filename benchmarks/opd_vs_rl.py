"""On-policy distillation vs GRPO from the same student base, measured in one run on this machine (apps/sync_ppo).

OPD runs the recipe `configs/opd.toml` (topk_fkl against the default cached teacher, built first if missing, not
timed; 128 prompts x 2 responses a step). GRPO runs the app's defaults for the algorithm and the rollout (32 prompts
x 8 responses: GRPO needs groups) with the recipe's training loop and optimiser (its `[train]` and `[optim]`
tables: 4 mini-batches a step, cosine decay from 2e-4; on 100 steps they lift GRPO from 84.0% to 87.1%, so the
baseline is the stronger one). Both: the same task, warm-up base, 256 trained responses a step, seed and steps.
Validation (greedy, every `--val-every` steps) gives each run's accuracy curve against trained samples. The target
is GRPO's final accuracy (or `--target`); samples-to-target is the trained samples up to the first validation that
reaches it.

The last line is `opd samples-to-target <ratio>x  final <opd_acc> vs <grpo_acc>  teacher <teacher_acc>`, where
`<ratio>` is GRPO's trained samples to reach the target divided by OPD's, and accuracies are in percent.

Usage: `uv run python benchmarks/opd_vs_rl.py [--steps 100] [--val-every 5] [--target 0] [--addition]`
(`--addition`: the toy task's addition source too, where GRPO barely moves from its warm-up base).
"""

from __future__ import annotations

import argparse
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Curve:
    kind: str
    samples: list[float]  # cumulative trained samples at each validated step (0 at the base)
    accuracy: list[float]  # greedy validation accuracy there, in [0, 1]
    by_source: dict[str, float]  # final accuracy per data source

    def samples_to(self, target: float) -> float | None:
        return next((n for n, a in zip(self.samples, self.accuracy, strict=True) if a >= target - 1e-9), None)


def _curve(kind: str, run_dir: Path) -> Curve:
    from run_lifecycle import read_metrics

    rows = read_metrics(run_dir / "metrics.jsonl")
    samples, curve_n, curve_acc, last = 0.0, [], [], {}
    for r in rows:
        samples += float(r.get("rollout/num_samples", 0.0))
        if "val/greedy_acc" in r:
            curve_n.append(samples)
            curve_acc.append(float(r["val/greedy_acc"]))
            last = r
    sources = {k.split("/")[1]: float(v) for k, v in last.items() if k.startswith("val-core/") and k.endswith("@1")}
    return Curve(kind, curve_n, curve_acc, sources)


RECIPE = Path(__file__).resolve().parents[1] / "configs" / "opd.toml"


def _loop_flags() -> list[str]:
    """The recipe's `[train]` and `[optim]` tables as flags (read from the file: GRPO trains with the same loop)."""
    recipe = tomllib.loads(RECIPE.read_text())
    return [
        f for section in ("train", "optim") for k, v in recipe[section].items() for f in (f"--{section}.{k}", str(v))
    ]


def _train(args: argparse.Namespace, run_dir: Path, *flags: str) -> int:
    """Trains one run; returns its responses per step."""
    from sync_ppo.cli import parse
    from trainers.sync_ppo.trainer import train

    common = ["--run.steps", str(args.steps), "--run.dir", str(run_dir), "--run.progress", "false",
              "--run.plots", "false", "--run.checkpoint_every", "0", "--validation.every_steps", str(args.val_every),
              "--run.seed", str(args.seed), *args.task_flags]  # fmt: skip
    cfg, _ = parse([*common, *flags])
    train(cfg)
    return cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt


def _teacher_accuracy(args: argparse.Namespace) -> float:
    from rl_tasks.model_config import ModelConfig
    from trainers.distillation.teacher import TeacherConfig, ensure_teacher
    from trainers.recipe.config import AppWarmupConfig, SortTaskConfig

    task = SortTaskConfig(addition_weight=0.5, sort_weight=0.5) if args.addition else SortTaskConfig()
    cache = Path(".cache/warmup").resolve()
    # built here, not timed
    where = ensure_teacher(TeacherConfig(), task.build(), AppWarmupConfig(), ModelConfig(), cache)
    assert where.val_accuracy is not None
    return where.val_accuracy


def _print_curve(c: Curve) -> None:
    points = "  ".join(f"{int(n)}:{100 * a:.1f}" for n, a in zip(c.samples, c.accuracy, strict=True))
    sources = ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(c.by_source.items()))
    print(f"{c.kind:4s} samples:accuracy%  {points}   final by source: {sources}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--val-every", type=int, default=5)
    p.add_argument("--target", type=float, default=0.0, help="accuracy to reach (0: GRPO's final accuracy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--addition", action="store_true", help="half the prompts from the toy task's addition source")
    args = p.parse_args()
    args.task_flags = ["--task.addition_weight", "0.5", "--task.sort_weight", "0.5"] if args.addition else []
    teacher = _teacher_accuracy(args)
    with tempfile.TemporaryDirectory(prefix="opd_vs_rl_") as tmp:
        per_step = (
            _train(args, Path(tmp) / "grpo", *_loop_flags()),
            _train(args, Path(tmp) / "opd", "--config", str(RECIPE)),
        )
        if per_step[0] != per_step[1]:
            raise SystemExit(
                f"expected the same responses per step for both runs, got grpo {per_step[0]}, opd {per_step[1]}"
            )
        grpo, opd = _curve("grpo", Path(tmp) / "grpo"), _curve("opd", Path(tmp) / "opd")
    for c in (grpo, opd):
        _print_curve(c)
    target = args.target or grpo.accuracy[-1]
    need_grpo, need_opd = grpo.samples_to(target), opd.samples_to(target)
    print(f"target {100 * target:.1f}%: grpo needs {need_grpo} samples, opd {need_opd}")
    ratio = "n/a" if not need_grpo or not need_opd else f"{need_grpo / need_opd:.1f}"
    if need_opd == 0:
        ratio = "inf"  # the base already reaches it: cannot happen with GRPO's own final accuracy as the target
    print(
        f"opd samples-to-target {ratio}x  final {100 * opd.accuracy[-1]:.1f} vs {100 * grpo.accuracy[-1]:.1f}  "
        f"teacher {100 * teacher:.1f}"
    )


if __name__ == "__main__":
    main()
