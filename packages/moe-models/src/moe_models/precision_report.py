"""`uv run python -m moe_models.precision_report RUN_DIR [--step S] [--tolerance T]`: where the engine's and the
trainer's forward first diverge, and a per-layer table, from the precision probe's records
(`RUN_DIR/debug/precision/step_<s>.jsonl`, written by `--debug.precision_steps`).

"First" is in forward order (embedding, then per layer: attn_out, router_logits, topk, mlp_out, hidden, then the
logits), over every probed sample; an op diverges when its relative difference exceeds the tolerance (`topk`: when
any token's expert set differs). The table shows, per layer and op, the largest relative difference over the
samples (`topk`: the largest fraction of flipped tokens).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from moe_models.forward_trace import OPS
from moe_models.precision_probe import FOLDER, OpDiff, read_probe

ORDER = ("embed", *OPS, "logits")


def first_divergence(diffs: Sequence[OpDiff], tolerance: float) -> OpDiff | None:
    ranked = sorted(diffs, key=lambda d: (d.layer, ORDER.index(d.op), d.sample))
    return next((d for d in ranked if d.diverged(tolerance)), None)


def table(diffs: Sequence[OpDiff]) -> str:
    layers = sorted({d.layer for d in diffs})
    ops = [op for op in ORDER if any(d.op == op for d in diffs)]
    head = "layer  " + "  ".join(f"{op:>13s}" for op in ops)
    lines = [head, "-" * len(head)]
    for layer in layers:
        cells = []
        for op in ops:
            mine = [d for d in diffs if d.layer == layer and d.op == op]
            if not mine:
                cells.append(f"{'':>13s}")
            elif op == "topk":
                cells.append(f"{max(d.flip_frac for d in mine):>8.2%} flip")
            else:
                cells.append(f"{max(d.rel for d in mine):>13.2e}")
        name = (
            "embed"
            if layer < 0
            else "logits"
            if any(d.op == "logits" for d in diffs if d.layer == layer)
            else str(layer)
        )
        lines.append(f"{name:>5s}  " + "  ".join(cells))
    return "\n".join(lines)


def report(run_dir: Path, step: int | None, tolerance: float) -> str:
    folder = run_dir / FOLDER
    files = sorted(folder.glob("step_*.jsonl"), key=lambda p: int(p.stem.removeprefix("step_")))
    if not files:
        raise SystemExit(
            f"precision_report: expected probe records under {folder}, got none (run with --debug.precision_steps)"
        )
    path = files[-1] if step is None else folder / f"step_{step}.jsonl"
    if not path.exists():
        raise SystemExit(f"precision_report: expected {path}, got no such file (have {[p.name for p in files]})")
    diffs = read_probe(path)
    first = first_divergence(diffs, tolerance)
    if first is None:
        where = "no op diverges beyond the tolerance"
    else:
        what = (
            f"{first.flip_frac:.2%} of its tokens routed to another expert set"
            if first.op == "topk"
            else f"rel {first.rel:.2e}, max |diff| {first.max_abs:.2e}"
        )
        where = f"first divergence: layer {first.layer} op {first.op} (sample {first.sample}: {what})"
    return f"{path.name}: {len({d.sample for d in diffs})} samples, tolerance {tolerance:g}\n{where}\n{table(diffs)}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m moe_models.precision_report", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--step", type=int, default=None, help="the probed step (default: the latest)")
    p.add_argument("--tolerance", type=float, default=1e-2, help="relative difference that counts as diverged")
    args = p.parse_args(argv)
    print(report(args.run_dir, args.step, args.tolerance))


if __name__ == "__main__":
    main()
