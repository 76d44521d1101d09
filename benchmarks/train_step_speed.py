"""The torch backend's `train_step` before and after its two speed settings, on the same batches in one run.

"before" is the apps' default trainer before commit 17a566c (`backend.experts_kernel padded`,
`train.micro_batch_tokens 8192`), "after" today's defaults (read from `TorchBackendConfig` and `TrainLoopConfig`;
17a566c made them `looped`, `2048`, later commits `grouped`, `4096`). Two batches of the tiny preset with router
replay and the mismatch sample on: the default task's shape (32 prompts x 8 samples, prompts of 10-16 tokens,
responses of 4-12) and the long-tail shape (16 x 4, responses of 10-304 tokens drawn as `configs/longtail.toml`
draws them). What helped at 17a566c: the looped experts kernel skips the zero padding of the batched one, and a
micro-batch's activations fit the L2 cache better at 2048 tokens than at 8192 (since blocked attention and shared
prompts, 4096 is the faster budget: docs/benchmarks.md).

Run: `uv run python benchmarks/train_step_speed.py [--steps 5] [--threads 1]`; the last line prints samples/s
after / before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from trainers.algorithm.build import build_algorithm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backend_step_time import make_batch, make_model
from moe_models import MoEForCausalLM
from trainers import TrainBatch, TrainLoopConfig, train_step
from trainers.algorithm import PPOConfig
from trainers.backend import OptimConfig, TorchBackend
from trainers.backend.config import TorchBackendConfig

SETTINGS = {
    "before": ("padded", 8192),
    "after": (TorchBackendConfig().experts_kernel, TrainLoopConfig().micro_batch_tokens),
}


def long_tail_batch(model: torch.nn.Module, shared_prompts: bool = False) -> TrainBatch:
    """16 x 4 samples whose response lengths follow the scratchpad task's trace lengths (seeded); `shared_prompts` as
    in `make_batch`."""
    import numpy as np
    from rl_tasks.sort_trace import SortTraceSource, trace_length

    src = SortTraceSource()
    rng = np.random.default_rng(0)
    lengths = [
        trace_length(src.min_len + int(rng.choice(len(src.length_probs), p=src.length_probs))) + 1 for _ in range(16)
    ]
    return make_batch(model, 16, 4, [n for n in lengths for _ in range(4)], shared_prompts)


def benchmark_shapes(model: MoEForCausalLM, shared_prompts: bool = False) -> dict[str, tuple[TrainBatch, int]]:
    """The two batches every train-step benchmark times, by name, each with its max new tokens; `shared_prompts` as
    in `make_batch` (the GRPO batches the apps train on)."""
    return {
        "default 32x8": (make_batch(model, 32, 8, shared_prompts=shared_prompts), 12),
        "long-tail 16x4": (long_tail_batch(model, shared_prompts), 305),
    }


def seconds_per_step(batch: TrainBatch, kernel: str, budget: int, steps: int, max_new_tokens: int) -> float:
    model = make_model()
    backend = TorchBackend(model, OptimConfig(lr=1e-5), device="cpu", experts_kernel=kernel)
    algorithm = build_algorithm(PPOConfig(), max_new_tokens=max_new_tokens)
    loop = TrainLoopConfig(router_replay=True, micro_batch_tokens=budget)
    times = []
    for i in range(steps + 1):  # one warm-up step
        t0 = time.perf_counter()
        train_step(backend, algorithm, batch, loop)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=5, help="timed steps per setting (median)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: the apps' trainer default)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    shapes = benchmark_shapes(make_model())
    ratios = []
    for name, (batch, max_new) in shapes.items():
        rows = batch.input_ids.shape[0]
        sec = {k: seconds_per_step(batch, kern, budget, args.steps, max_new) for k, (kern, budget) in SETTINGS.items()}
        ratios.append(sec["before"] / sec["after"])
        print(
            f"{name}: before {rows / sec['before']:6.1f} samples/s ({sec['before']:.3f} s/step)  after "
            f"{rows / sec['after']:6.1f} samples/s ({sec['after']:.3f} s/step)",
            flush=True,
        )
    print(f"train samples/s after/before: default {ratios[0]:.2f}x  long-tail {ratios[1]:.2f}x")


if __name__ == "__main__":
    main()
