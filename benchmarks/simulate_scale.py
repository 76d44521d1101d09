"""A discrete-event simulation of the RL pipeline, sync and async, driven by measured component costs.

The model (one simulated engine step advances every active response of a rollouter by one token):
- a rollouter decodes its active responses together; a decode step costs `c0 + c1 x active` seconds (fitted from a
  synchronous run's generation times and response lengths), admitted prompts add `prefill_s` each;
- prompt i belongs to step `s = i // P + 1` and may start once the trainer holds weights `>= s - 1 - k` (the
  staleness bound `k`); a rollouter keeps at most `(1 + k) x P` prompts in flight, as `apps/async_ppo` does;
- the trainer takes the `P` oldest finished groups, trains for `train_s`, then pushes: `push_s` on the trainer,
  `pause_s` during which every rollouter stops (the new weights load);
- sync is the same with `k = 0` and no overlap: generate, then train, then push.
The lag of a trained group is the trainer's version minus the version it started under.

`--validate SYNC_RUN ASYNC_RUN` fits the costs from the synchronous run's metrics and dumps, simulates both with the
async run's settings, and compares with the measured async/sync samples/s ratio and the measured lag histogram
(from the async run's dumps), once with the sync run's trainer cost and once with the async run's (the trainer
is slower next to a busy rollouter on a shared machine, which the model takes as an input, not derives).
Projections to large clusters, with the same model: `benchmarks/project_scale.py` (docs/scale.md).

Usage: `uv run python benchmarks/simulate_scale.py --validate runs/sync_ppo/<run> runs/async_ppo/<run>`
"""

from __future__ import annotations

import argparse
import json
import statistics
import tomllib
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Costs:
    c0: float  # seconds per decode step
    c1: float  # seconds per active response per decode step
    prefill_s: float  # seconds per admitted prompt group
    train_s: float  # seconds per trainer step
    push_s: float  # trainer-side seconds per weight push
    pause_s: float  # rollouter-side stall per push


@dataclass(frozen=True)
class Workload:
    prompts_per_step: int
    samples_per_prompt: int
    lengths: tuple[int, ...]  # empirical response lengths (tokens), drawn with replacement
    staleness: int
    rollouters: int = 1


@dataclass
class Rollouter:
    clock: float = 0.0
    active: list[list[int]] = field(default_factory=list)  # per group: [prompt, start version, tokens left x n...]


@dataclass(frozen=True)
class Result:
    samples_per_s: float
    lags: Counter[int]
    trainer_busy: float  # fraction of wall time the trainer trains or pushes


def simulate_sync(costs: Costs, w: Workload, steps: int, rng: np.random.Generator) -> Result:
    wall = 0.0
    n = w.prompts_per_step * w.samples_per_prompt
    for _ in range(steps):
        lengths = rng.choice(w.lengths, size=n)
        active = [(lengths >= t).sum() for t in range(1, int(lengths.max()) + 1)]
        wall += w.prompts_per_step * costs.prefill_s + sum(costs.c0 + costs.c1 * a for a in active)
        wall += costs.train_s + costs.push_s + costs.pause_s
    busy = steps * (costs.train_s + costs.push_s) / wall
    return Result(steps * n / wall, Counter({0: steps * w.prompts_per_step}), busy)


def _admit(
    r: Rollouter, w: Workload, version: int, next_prompt: int, total: int, rng: np.random.Generator, costs: Costs
) -> int:
    """Starts prompts on `r` up to its in-flight cap and the staleness bound; returns the next prompt index."""
    p, k = w.prompts_per_step, w.staleness
    while len(r.active) < (1 + k) * p and next_prompt < total and next_prompt // p - k <= version:
        r.active.append([next_prompt, version, *rng.choice(w.lengths, size=w.samples_per_prompt).tolist()])
        r.clock += costs.prefill_s
        next_prompt += 1
    return next_prompt


def _decode_step(r: Rollouter, costs: Costs, finished: dict[int, tuple[float, int]]) -> None:
    r.clock += costs.c0 + costs.c1 * sum(len(g) - 2 for g in r.active)
    for g in list(r.active):
        g[2:] = [x - 1 for x in g[2:] if x > 1]
        if len(g) == 2:
            r.active.remove(g)
            finished[g[0]] = (r.clock, g[1])


def simulate_async(costs: Costs, w: Workload, steps: int, rng: np.random.Generator) -> Result:
    """Rollouters decode in parallel; the trainer trains step s on the prompts of step s (as `apps/async_ppo`'s
    ledger does) once they have all finished; a push lands at the end of the trainer's step."""
    p = w.prompts_per_step
    version, next_prompt, trainer_free, busy = 0, 0, 0.0, 0.0
    finished: dict[int, tuple[float, int]] = {}  # prompt -> (finish time, start version)
    rolls = [Rollouter() for _ in range(w.rollouters)]
    lags: Counter[int] = Counter()
    push_at: float | None = None
    while version < steps:
        for r in rolls:
            next_prompt = _admit(r, w, version, next_prompt, steps * p, rng, costs)
        step_prompts = range(version * p, (version + 1) * p)
        if push_at is None and all(i in finished for i in step_prompts):
            start = max(trainer_free, max(finished[i][0] for i in step_prompts))
            push_at = start + costs.train_s + costs.push_s
            busy += costs.train_s + costs.push_s
        active = [r for r in rolls if r.active]
        nxt = min(active, key=lambda r: r.clock) if active else None
        if push_at is not None and (nxt is None or push_at <= nxt.clock):
            lags.update(version - finished.pop(i)[1] for i in step_prompts)
            version, trainer_free, push_at = version + 1, push_at, None
            for r in rolls:  # every engine stops to load the new weights; an idle one resumes from the push
                r.clock = max(r.clock, trainer_free) + costs.pause_s
            continue
        if nxt is None:
            raise RuntimeError("simulate_async: no rollouter has work and no step can train (a deadlock)")
        _decode_step(nxt, costs, finished)
    return Result(steps * p * w.samples_per_prompt / trainer_free, lags, busy / trainer_free)


def _rows(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _lengths(run: Path, step: int) -> list[int]:
    lines = (run / "rollouts" / f"{step}.jsonl").read_text().splitlines()
    return [len(json.loads(line)["response_ids"]) for line in lines if line.strip()]


def fit_costs(sync_run: Path) -> tuple[Costs, tuple[int, ...]]:
    """c0, c1 by least squares of each step's generation time on (decode steps, response tokens, 1); the
    intercept, spread over the step's prompts, is the prefill cost per prompt."""
    rows = [r for r in _rows(sync_run) if r["step"] > 1 and "timing/generate_s" in r]
    feats, target, lengths = [], [], []
    for r in rows:
        ls = _lengths(sync_run, int(r["step"]))
        lengths += ls
        feats.append([max(ls), sum(ls), 1.0])
        target.append(r["timing/generate_s"])
    (c0, c1, const), *_ = np.linalg.lstsq(np.array(feats), np.array(target), rcond=None)
    prompts = tomllib.loads((sync_run / "config.toml").read_text())["rollout"]["prompts_per_step"]
    train = statistics.fmean(r["timing/train_s"] for r in rows)
    push = statistics.fmean(r["timing/push_s"] for r in rows)
    return Costs(max(float(c0), 0.0), max(float(c1), 0.0), max(float(const), 0.0) / prompts, train, push, 0.0), tuple(
        lengths
    )


def async_trainer_costs(costs: Costs, async_run: Path) -> Costs:
    """`costs` with the trainer's step as the async run measured it (its update plus the weight-sync round trip):
    on a shared machine the trainer is slower next to a busy rollouter than alone, which the model does not derive."""
    rows = [r for r in _rows(async_run) if r["step"] > 1 and "timing/train_s" in r]
    train = statistics.fmean(r["timing/train_s"] + r.get("timing/sync_s", 0.0) for r in rows)
    return replace(costs, train_s=train, push_s=statistics.fmean(r["timing/push_s"] for r in rows))


def measured_async(async_run: Path) -> tuple[float, Counter[int]]:
    rows = [r for r in _rows(async_run) if r["step"] > 1 and "perf/samples_per_s" in r]
    lags: Counter[int] = Counter()
    for r in rows:
        for line in (async_run / "rollouts" / f"{int(r['step'])}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec["status"] == "ok":
                lags[int(r["step"]) - 1 - int(rec["min_version"])] += 1
    total = sum(r["rollout/num_samples"] for r in rows) / sum(r["timing/step_s"] for r in rows)
    return total, lags


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--validate", nargs=2, type=Path, metavar=("SYNC_RUN", "ASYNC_RUN"), required=True)
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    sync_run, async_run = args.validate
    costs, lengths = fit_costs(sync_run)
    acfg = tomllib.loads((async_run / "config.toml").read_text())
    w = Workload(
        acfg["rollout"]["prompts_per_step"],
        acfg["rollout"]["samples_per_prompt"],
        lengths,
        acfg["pipeline"]["max_staleness"],
        acfg["ray"]["num_rollouters"],
    )
    sync_rows = [r for r in _rows(sync_run) if r["step"] > 1]
    meas_sync = sum(r["rollout/num_samples"] for r in sync_rows) / sum(r["timing/step_s"] for r in sync_rows)
    meas_async, meas_lags = measured_async(async_run)
    sim_sync = simulate_sync(costs, w, args.steps, np.random.default_rng(0))
    print(
        f"fitted: decode step {1e3 * costs.c0:.2f} ms + {1e6 * costs.c1:.1f} us x active responses; trainer "
        f"{costs.train_s:.3f} s + push {costs.push_s:.3f} s a step"
    )
    print(f"sync  samples/s: simulated {sim_sync.samples_per_s:.0f}, measured {meas_sync:.0f}")
    meas_ratio = meas_async / meas_sync
    variants = (("sync run's trainer cost", costs), ("async run's trainer cost", async_trainer_costs(costs, async_run)))
    for name, c in variants:
        sim = simulate_async(c, w, args.steps, np.random.default_rng(0))
        ratio = sim.samples_per_s / sim_sync.samples_per_s
        lag_text = ", ".join(
            f"lag {k}: {sim.lags[k] / sum(sim.lags.values()):.1%} vs {meas_lags[k] / sum(meas_lags.values()):.1%}"
            for k in sorted(set(sim.lags) | set(meas_lags))
        )
        print(
            f"with the {name}: async {sim.samples_per_s:.0f} samples/s (measured {meas_async:.0f}); simulated vs "
            f"measured {lag_text}; trainer busy {sim.trainer_busy:.0%}"
        )
        print(
            f"  async/sync ratio: simulated {ratio:.2f}x, measured {meas_ratio:.2f}x "
            f"(error {100 * abs(ratio - meas_ratio) / meas_ratio:.0f}%)"
        )


if __name__ == "__main__":
    main()
