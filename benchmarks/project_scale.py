"""Projects sync (colocated) vs async (split) RL throughput and GPU use from 8 to 1,024 GPUs with a vectorised
discrete-event model of the pipeline, and writes `docs/scale.png` and the table of `docs/scale.md`.

The pipeline model is the one `benchmarks/simulate_scale.py` validates on this machine (decode steps costing
`c0 + c1 x active sequences`, a staleness bound, a trainer that takes each step's prompts in order, weight pushes
that pause the engines), here with many engines, KV-capacity-limited batches, and decode advanced in chunks of
`--chunk` tokens (`--check` compares it with simulate_scale's token-by-token model on one engine). Inputs are
published or datasheet figures, each named where it is set (`Scenario`); none is fitted to an outcome.

- sync: every GPU generates the step's responses (one engine per `gpus_per_engine` GPUs; the step ends with its
  longest response), then every GPU trains, then the weights reshard (`sync_s`).
- async: `rollout_fraction` of the GPUs generate continuously, the rest train; prompts of step `s` may start once
  the trainer holds weights `>= s - 1 - staleness`; a push costs the trainer `sync_s` and pauses every engine for
  `sync_s`; responses in flight continue under the new weights (partial rollout).
- GPU use: the fraction of all GPU-seconds spent training, or decoding weighted by the batch fill (an engine with
  `a` of its `engine_max_seqs` sequences active counts `a / engine_max_seqs` of its time): a long tail of a few
  sequences keeps an engine busy but mostly idle.

Usage: `uv run python benchmarks/project_scale.py` (~1 min); `--check` for the cross-check only.
"""

from __future__ import annotations

import argparse
import heapq
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class Scenario:
    """Qwen3-30B-A3B-like MoE on H100s (defaults; every figure named)."""

    prompts_per_step: int = 512  # DAPO/verl recipe: 512 prompts x 16 samples
    samples_per_prompt: int = 16
    prompt_tokens: int = 512
    max_response: int = 8192  # verl's Qwen3-30B-A3B async run: 8K responses
    median_response: float = 1500.0  # long tail: lognormal, sigma 0.8, capped at max_response (assumption)
    sigma_response: float = 0.8
    gpus_per_engine: int = 2  # TP 2: 61 GB of bf16 weights leave KV room on 2 x 80 GB
    engine_max_seqs: int = 256  # concurrent sequences per engine (KV capacity at ~2.5K context)
    # decode is memory bound; H100 HBM 3.35 TB/s per GPU, of which an engine achieves ~50% (assumption)
    c0: float = 61e9 / (2 * 3.35e12 * 0.5)  # s per decode step: every expert's weights (61 GB) read once per step
    c1: float = 98e3 * 2500 / (2 * 3.35e12 * 0.5)  # s per active sequence: 98 KB of KV per token x ~2.5K context
    train_tokens_per_gpu_s: float = 9.4e3  # 6 x 3.3B active params per token (+ one old-log-prob forward) at 25% MFU
    sync_s: float = 4.38  # verl checkpoint-engine weight sync for Qwen3-30B-A3B (15.76 s before it)
    rollout_fraction: float = 0.75  # verl's 30B-A3B split: 96 rollout : 32 train GPUs
    staleness: int = 1
    steps: int = 12


@dataclass(frozen=True)
class Outcome:
    samples_per_s: float
    gpu_use: float
    mean_lag: float
    split: float = 1.0  # the fraction of GPUs that generate (sync: all of them, in turn)


def draw_lengths(sc: Scenario, n: int, rng: np.random.Generator) -> np.ndarray:
    raw = rng.lognormal(np.log(sc.median_response), sc.sigma_response, size=n)
    return np.clip(np.round(raw), 1, sc.max_response).astype(np.int64)


def _decode_until_done(lengths: np.ndarray, engines: int, sc: Scenario, chunk: int) -> tuple[float, float]:
    """One sync generation phase: responses dealt to engines round-robin, each engine batch-limited. Returns
    (wall seconds, engine-seconds of decoding weighted by batch fill)."""
    wall, busy = 0.0, 0.0
    for e in range(engines):
        mine = np.sort(lengths[e::engines])[::-1]
        t, queue, active = 0.0, list(mine), np.zeros(0, dtype=np.int64)
        while queue or active.size:
            room = sc.engine_max_seqs - active.size
            if room > 0 and queue:
                active = np.concatenate([active, np.array(queue[:room])])
                queue = queue[room:]
            dt = chunk * (sc.c0 + sc.c1 * active.size)
            t += dt
            busy += dt * active.size / sc.engine_max_seqs
            active = active - chunk
            active = active[active > 0]
        wall = max(wall, t)
    return wall, busy


def simulate_sync(sc: Scenario, gpus: int, rng: np.random.Generator, chunk: int) -> Outcome:
    engines = max(1, gpus // sc.gpus_per_engine)
    n = sc.prompts_per_step * sc.samples_per_prompt
    wall = used = 0.0
    for _ in range(sc.steps):
        lengths = draw_lengths(sc, n, rng)
        gen_wall, gen_busy = _decode_until_done(lengths, engines, sc, chunk)
        train = (lengths.sum() + n * sc.prompt_tokens) / (sc.train_tokens_per_gpu_s * gpus)
        wall += gen_wall + train + sc.sync_s
        used += gen_busy * sc.gpus_per_engine + train * gpus
    return Outcome(sc.steps * n / wall, used / (gpus * wall), 0.0)


@dataclass
class _Engine:
    clock: float
    remaining: np.ndarray  # tokens left per active sequence
    prompt: np.ndarray  # the prompt index of each active sequence
    busy: float = 0.0


def simulate_async(sc: Scenario, gpus: int, rng: np.random.Generator, chunk: int) -> Outcome:
    per = sc.gpus_per_engine
    n_roll = max(per, round(gpus * sc.rollout_fraction) // per * per)
    n_train = max(1, gpus - n_roll)
    engines = [_Engine(0.0, np.zeros(0, np.int64), np.zeros(0, np.int64)) for _ in range(n_roll // per)]
    p, m, total = sc.prompts_per_step, sc.samples_per_prompt, sc.steps * sc.prompts_per_step
    left = np.full(total, m)  # unfinished samples per prompt
    done_at, start_version = np.full(total, np.inf), np.zeros(total, np.int64)
    lengths = draw_lengths(sc, total * m, rng).reshape(total, m)
    version, next_prompt, trainer_free, train_busy, lags = 0, 0, 0.0, 0.0, []
    push_at: float | None = None  # when the trainer, done with step `version + 1`, starts pushing
    heap = [(0.0, i) for i in range(len(engines))]
    while version < sc.steps:
        rows = slice(version * p, (version + 1) * p)
        if push_at is None and np.isfinite(done_at[rows]).all():
            train = (lengths[rows].sum() + p * m * sc.prompt_tokens) / (sc.train_tokens_per_gpu_s * n_train)
            push_at = max(trainer_free, float(done_at[rows].max())) + train
            train_busy += train
        if push_at is not None and (not heap or push_at <= heap[0][0]):
            lags.extend((version - start_version[rows]).tolist())
            version, trainer_free, push_at = version + 1, push_at + sc.sync_s, None
            for e in engines:  # every engine pauses for the push; a parked one resumes from it
                e.clock = max(e.clock, trainer_free - sc.sync_s) + sc.sync_s
            heap = [(e.clock, i) for i, e in enumerate(engines)]
            heapq.heapify(heap)
            continue
        if not heap:
            raise RuntimeError("project_scale: no engine has work and no step can train (a deadlock)")
        _, i = heapq.heappop(heap)
        e = engines[i]
        while (
            next_prompt < total
            and next_prompt // p - sc.staleness <= version
            and e.remaining.size + m <= sc.engine_max_seqs
        ):
            e.remaining = np.concatenate([e.remaining, lengths[next_prompt]])
            e.prompt = np.concatenate([e.prompt, np.full(m, next_prompt)])
            start_version[next_prompt] = version
            next_prompt += 1
        if e.remaining.size == 0:
            continue  # parked until the next push
        dt = chunk * (sc.c0 + sc.c1 * e.remaining.size)
        e.clock += dt
        e.busy += dt * e.remaining.size / sc.engine_max_seqs
        e.remaining = e.remaining - chunk
        finished = e.prompt[e.remaining <= 0]
        if finished.size:
            np.subtract.at(left, finished, 1)
            done = np.unique(finished)
            done_at[done[left[done] == 0]] = e.clock
        keep = e.remaining > 0
        e.remaining, e.prompt = e.remaining[keep], e.prompt[keep]
        heapq.heappush(heap, (e.clock, i))
    used = sum(e.busy for e in engines) * per + train_busy * n_train
    return Outcome(total * m / trainer_free, used / (gpus * trainer_free), float(np.mean(lags)))


SPLITS = (0.5, 0.625, 0.75, 0.875)  # rollout fractions tried at each size (the best one is reported)


def best_split(sc: Scenario, gpus: int, chunk: int, seed: int) -> tuple[float, Outcome]:
    """The rollout fraction (of `SPLITS`) with the highest async throughput at `gpus`."""
    tried = [
        (f, simulate_async(replace(sc, rollout_fraction=f), gpus, np.random.default_rng(seed), chunk))
        for f in SPLITS
        if round(gpus * f) >= sc.gpus_per_engine and gpus - round(gpus * f) >= 1
    ]
    return max(tried, key=lambda t: t[1].samples_per_s)


def project(sc: Scenario, chunk: int, seed: int, prompts_per_gpu: float = 0.0) -> list[tuple[int, Outcome, Outcome]]:
    """Sync vs async (best split) at every size; `prompts_per_gpu` > 0 scales the step's batch with the GPUs."""
    rows = []
    for gpus in GPU_COUNTS:
        at = replace(sc, prompts_per_step=max(1, round(prompts_per_gpu * gpus))) if prompts_per_gpu else sc
        sync = simulate_sync(at, gpus, np.random.default_rng(seed), chunk)
        split, async_ = best_split(at, gpus, chunk, seed)
        rows.append((gpus, sync, replace(async_, split=split)))
        print(
            f"{gpus:>5} GPUs ({at.prompts_per_step} x {at.samples_per_prompt}): sync {sync.samples_per_s:8.1f} "
            f"samples/s ({sync.gpu_use:4.0%} GPU use)  async {async_.samples_per_s:8.1f} ({async_.gpu_use:4.0%}, "
            f"{split:.0%} rollout GPUs, mean lag {async_.mean_lag:.2f})  "
            f"{async_.samples_per_s / sync.samples_per_s:.2f}x",
            flush=True,
        )
    return rows


def markdown(rows: list[tuple[int, Outcome, Outcome]]) -> str:
    out = [
        "| GPUs | sync samples/s | sync GPU use | async samples/s | async GPU use | rollout GPUs | async mean lag | "
        "async/sync |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for gpus, s, a in rows:
        out.append(
            f"| {gpus} | {s.samples_per_s:.1f} | {s.gpu_use:.0%} | {a.samples_per_s:.1f} | {a.gpu_use:.0%} | "
            f"{a.split:.0%} | {a.mean_lag:.2f} | {a.samples_per_s / s.samples_per_s:.2f}x |"
        )
    return "\n".join(out)


def plot(curves: dict[str, list[tuple[int, Outcome, Outcome]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (name, rows), color in zip(curves.items(), ("tab:blue", "tab:orange", "tab:green"), strict=False):
        gpus = [g for g, _, _ in rows]
        left.plot(gpus, [a.samples_per_s for _, _, a in rows], "o-", color=color, label=f"async, {name}")
        right.plot(gpus, [a.gpu_use for _, _, a in rows], "o-", color=color, label=f"async, {name}")
    for name, color in (("staleness 1", "black"), ("staleness 1, batch grows with GPUs", "tab:green")):
        rows = curves[name]
        gpus = [g for g, _, _ in rows]
        label = "sync, colocated" + (", batch grows" if "grows" in name else "")
        left.plot(gpus, [s.samples_per_s for _, s, _ in rows], "s--", color=color, label=label)
        right.plot(gpus, [s.gpu_use for _, s, _ in rows], "s--", color=color, label=label)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.set_ylabel("samples / s")
    right.set_ylabel("GPU use (training + batch-weighted decoding)")
    right.set_ylim(0, 1)
    left.legend(fontsize=8)
    left.set_title("throughput (512 x 16 a step unless the batch grows: 4 x 16 per GPU)", fontsize=9)
    right.set_title("GPU use")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def check(chunk: int) -> None:
    """The chunked decode against token-by-token decode (chunk 1) on a small scenario."""
    sc = Scenario(prompts_per_step=32, samples_per_prompt=8, max_response=1024, median_response=200.0, steps=6)
    for name, sim in (("sync", simulate_sync), ("async", simulate_async)):
        exact = sim(sc, 8, np.random.default_rng(0), 1).samples_per_s
        coarse = sim(sc, 8, np.random.default_rng(0), chunk).samples_per_s
        print(
            f"check {name}: chunk {chunk} {coarse:.1f} vs chunk 1 {exact:.1f} samples/s "
            f"({100 * abs(coarse - exact) / exact:.1f}% apart)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunk", type=int, default=64, help="tokens decoded per simulated event")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="only the chunked-vs-exact cross-check")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "scale.png")
    args = parser.parse_args()
    check(args.chunk)
    if args.check:
        return
    sc = Scenario()
    verl = simulate_async(sc, 128, np.random.default_rng(args.seed), args.chunk)
    colocated = simulate_sync(sc, 128, np.random.default_rng(args.seed), args.chunk)
    print(
        f"verl's published point, Qwen3-30B-A3B 8K, 96:32 async vs 128 colocated: 1.72x; projected "
        f"{verl.samples_per_s / colocated.samples_per_s:.2f}x"
    )
    print("-- at 128 GPUs (512 x 16, best split): weight sync and staleness")
    for sync_s in (0.5, 4.38, 15.76):
        for k in (0, 1, 2, 4):
            at = replace(sc, sync_s=sync_s, staleness=k)
            base = simulate_sync(at, 128, np.random.default_rng(args.seed), args.chunk).samples_per_s
            split, got = best_split(at, 128, args.chunk, args.seed)
            print(
                f"sync_s {sync_s:5.2f} staleness {k}: async/sync {got.samples_per_s / base:.2f}x "
                f"({split:.0%} rollout GPUs, mean lag {got.mean_lag:.2f})",
                flush=True,
            )
    curves = {}
    for k in (1, 4):
        print(f"-- staleness {k}, 512 x 16 responses a step")
        curves[f"staleness {k}"] = project(replace(sc, staleness=k), args.chunk, args.seed)
    print("-- staleness 1, 4 prompts x 16 responses per GPU a step")
    curves["staleness 1, batch grows with GPUs"] = project(sc, args.chunk, args.seed, prompts_per_gpu=4)
    plot(curves, args.out)
    for name, rows in curves.items():
        print(f"\n{name}:\n{markdown(rows)}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
