"""What router replay is worth when rollouts are sampled in bf16 and the trainer scores them in fp32, in one run.

Part 1, one batch: the native engine in bf16 (weights and KV cache) samples `--prompts` responses of the default
task (digit sorting) from the apps' warm-up base (temperature 1); the trainer's forward (fp32 weights of the same
checkpoint) scores the same tokens twice, routing by itself and replaying the routing the engine recorded (R3).
Per response token: |engine log-prob - trainer log-prob|, the k3 estimate of KL(engine || trainer)
(`r - 1 - log r` with `r = p_trainer / p_engine`), and the PPO clip fraction at ratio 1 (the first optimiser step
of a synchronous update in bypass mode: `|r - 1| > 0.2`); per token and MoE layer, whether the trainer's own top-k
expert *set* differs from the engine's (a routing flip).

Part 2, training: `apps/sync_ppo --rollout.engine.dtype bfloat16` twice from the same base and seed, with
`--train.router_replay true` and `false`, for `--steps` steps; the PNG (`--png`, default
`runs/benchmarks/router_replay_value.png`) shows each run's whole-batch k3 (`mismatch/replay/k3` and
`mismatch/train/k3`) and its training reward per step.

The last line is `replay k3 <x> vs no-replay <y> (<y/x>x)  flips <f>%` (part 1).

Usage: `uv run python benchmarks/router_replay_value.py [--prompts 512] [--steps 30] [--seed 0]`
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

CLIP = 0.2


@dataclass(frozen=True)
class Scored:
    """Per response token (all sequences concatenated)."""

    abs_diff: np.ndarray
    k3: np.ndarray
    clipped: np.ndarray
    flips: np.ndarray  # per token and MoE layer: the trainer's own top-k set differs from the engine's


def _base_and_prompts(count: int, seed: int) -> tuple[Path, list[list[int]], int]:
    from moe_models import load_tokenizer
    from rl_tasks.renderer import Renderer
    from trainers.recipe.config import AppWarmupConfig, SortTaskConfig
    from trainers.warmup import ensure_base_checkpoint

    task = SortTaskConfig().build()
    base = ensure_base_checkpoint(task, AppWarmupConfig(), Path(".cache/warmup").resolve())
    renderer = Renderer(load_tokenizer(base.checkpoint_dir), task.prompt_format)  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)
    train = task.splits.train
    picks = rng.choice(len(train), size=min(count, len(train)), replace=False)
    prompts = [renderer.prompt_ids(train[int(i)]) for i in picks]
    return base.checkpoint_dir, prompts, task.max_answer_chars + 1


def _sample_bf16(checkpoint: Path, prompts: list[list[int]], max_new: int, seed: int) -> list:  # type: ignore[type-arg]
    from engine_adapters.native import EngineConfig, NativeEngine
    from moe_models import load_pretrained
    from rollout_core import SamplingParams

    model = load_pretrained(checkpoint).to(torch.bfloat16)
    width = max(len(p) for p in prompts) + max_new
    engine = NativeEngine(model, EngineConfig(slots=128, dtype="bfloat16"), max_len=width, seed=seed)

    async def run() -> list:  # type: ignore[type-arg]
        try:
            calls = [
                engine.generate(f"r{i}", p, SamplingParams(max_new_tokens=max_new, temperature=1.0, seed=seed + i))
                for i, p in enumerate(prompts)
            ]
            return list(await asyncio.gather(*calls))
        finally:
            await engine.close()

    return asyncio.run(run())


def _score(checkpoint: Path, prompts: list[list[int]], segments: list, replay: bool) -> Scored:  # type: ignore[type-arg]
    from moe_models import RouterReplay, load_pretrained

    model = load_pretrained(checkpoint).eval()
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    flips: list[np.ndarray] = []
    for prompt, seg in zip(prompts, segments, strict=True):
        ids = torch.tensor([prompt + list(seg.token_ids)])
        rows = torch.from_numpy(seg.routed_experts.astype(np.int64))  # [T-1, L_moe, K], row t routed input t
        plan = None
        if replay:
            full = torch.zeros((1, ids.shape[1], *rows.shape[1:]), dtype=torch.int64)
            full[0, : len(rows)] = rows
            mask = torch.zeros((1, ids.shape[1]), dtype=torch.bool)
            mask[0, : len(rows)] = True
            plan = RouterReplay(ids=full, mask=mask)
        with torch.no_grad():
            lp, routed = model.token_log_probs(ids, torch.ones_like(ids), replay=plan, capture_routing=True)
        trainer = lp[0, len(prompt) - 1 :].numpy().astype(np.float64)
        parts.append((np.asarray(seg.log_probs, dtype=np.float64), trainer))
        own = routed[0, : len(rows)].sort(dim=-1).values
        flips.append((own != rows.sort(dim=-1).values).any(dim=-1)[len(prompt) - 1 :].numpy())
    engine = np.concatenate([e for e, _ in parts])
    trainer = np.concatenate([t for _, t in parts])
    r = np.exp(trainer - engine)
    return Scored(np.abs(trainer - engine), r - 1 - np.log(r), np.abs(r - 1) > CLIP, np.concatenate(flips))


def _train(run_dir: Path, steps: int, seed: int, replay: bool) -> list[dict[str, object]]:
    from run_lifecycle import read_metrics
    from sync_ppo.cli import parse
    from trainers.sync_ppo.trainer import train

    cfg, _ = parse(["--run.steps", str(steps), "--run.seed", str(seed), "--run.dir", str(run_dir),
                    "--rollout.engine.dtype", "bfloat16", "--train.router_replay", str(replay).lower(),
                    "--run.progress", "false", "--run.plots", "false", "--run.checkpoint_every", "0",
                    "--validation.every_steps", str(max(1, steps // 3))])  # fmt: skip
    train(cfg)
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if int(r["step"]) > 0]  # type: ignore[call-overload]


def _plot(on: list[dict[str, object]], off: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (kl, reward) = plt.subplots(1, 2, figsize=(10, 4))
    for rows, key, label in ((on, "mismatch/replay/k3", "replay on"), (off, "mismatch/train/k3", "replay off")):
        kl.plot([r["step"] for r in rows], [r[key] for r in rows], label=label)
        reward.plot([r["step"] for r in rows], [r["reward/mean"] for r in rows], label=label)
    kl.set_yscale("log")
    kl.set_title("train-vs-rollout k3 KL (bf16 rollouts, fp32 trainer)")
    reward.set_title("training reward")
    for ax in (kl, reward):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mean(rows: list[dict[str, object]], key: str) -> float:
    return float(np.mean([float(r[key]) for r in rows if key in r]))  # type: ignore[arg-type]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=512)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--png", type=Path, default=Path("runs/benchmarks/router_replay_value.png"))
    args = p.parse_args()
    torch.set_num_threads(1)
    checkpoint, prompts, max_new = _base_and_prompts(args.prompts, args.seed)
    segments = _sample_bf16(checkpoint, prompts, max_new, args.seed)
    own, replayed = _score(checkpoint, prompts, segments, False), _score(checkpoint, prompts, segments, True)
    print(f"part 1: {len(prompts)} bf16 rollouts, {len(own.k3)} response tokens, scored by the fp32 trainer")
    for name, s in (("no replay", own), ("replay", replayed)):
        print(
            f"  {name:9s}  mean |dlogp| {s.abs_diff.mean():.2e}  max {s.abs_diff.max():.2e}  k3 {s.k3.mean():.2e}  "
            f"clip fraction at ratio 1 {s.clipped.mean():.2%}"
        )
    print(
        f"  routing flips (trainer's own top-k set != engine's): {own.flips.mean():.2%} of token-layer rows, "
        f"{own.flips.any(axis=1).mean():.2%} of tokens"
    )
    with tempfile.TemporaryDirectory(prefix="router_replay_value_") as tmp:
        on = _train(Path(tmp) / "on", args.steps, args.seed, True)
        off = _train(Path(tmp) / "off", args.steps, args.seed, False)
    _plot(on, off, args.png)
    print(
        f"part 2: {args.steps} steps each; mean whole-batch k3 replay on {_mean(on, 'mismatch/replay/k3'):.2e}, "
        f"off {_mean(off, 'mismatch/train/k3'):.2e}; mean training reward {_mean(on, 'reward/mean'):.3f} vs "
        f"{_mean(off, 'reward/mean'):.3f}; wrote {args.png}"
    )
    x, y = replayed.k3.mean(), own.k3.mean()
    print(f"replay k3 {x:.2e} vs no-replay {y:.2e} ({y / x:.1f}x)  flips {100 * own.flips.mean():.2f}%")


if __name__ == "__main__":
    main()
