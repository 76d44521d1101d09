"""Our torch backend's full train step against transformers' `Qwen3MoeForCausalLM` on the same batches and weights.

Ours: `trainers.train_step` with the apps' defaults (the `train` section's micro-batch budget, the backend's experts
kernel, router replay and the mismatch sample on). Transformers: the step TRL's GRPOTrainer runs on a policy, in
micro-batches of padded tokens split as ours would split them without shared prompts (rows sorted longest first), at
each of `TRANSFORMERS_BUDGETS` tokens a micro-batch, its fastest counting (each printed): forward with the attention
mask, the log-prob of each sampled token at temperature 1, a token-mean clipped-ratio loss, backward, one AdamW step per
batch; the model is built by `AutoModelForCausalLM.from_pretrained` from the checkpoint our model wrote (its default
attention and experts implementations, which it prints). Two shapes, both the tiny preset, each a GRPO batch (a group's
samples share their prompt): the default task's (32 prompts x 8 samples, prompts of 10-16 tokens, responses of 4-12) and
the long-tail one (16 x 4, responses of 10-304 tokens as `configs/longtail.toml` draws them). Ours computes a group's
prompt once (`backend.share_prompts`); transformers computes every row. The machine's peak is a large float32 matmul at
the same thread count, timed in the same run. The steps alternate (ours, then transformers' at each budget, then ours
again, ...), so that load from elsewhere slows all alike. `ours % of peak` counts the model's matmul FLOPs, those of the
projections, experts, router and head (forward and backward: 6 per active parameter per real token, every token through
every layer, also where ours skips work; attention scores, the mismatch forward and padding not counted).

Run: `uv run python benchmarks/train_vs_transformers.py [--steps 10] [--threads 1]`. The last lines, one per shape:
`<shape>: train tokens/s ours <a> vs transformers <b> (<r>x)  peak <p> GFLOP/s  ours <m>% of peak`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from trainers.algorithm.build import build_algorithm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backend_step_time import make_model
from moe_models import MoEForCausalLM, save_pretrained
from train_step_speed import benchmark_shapes
from trainers import TrainBatch, TrainLoopConfig, train_step
from trainers.algorithm import PPOConfig
from trainers.backend import OptimConfig, TorchBackend
from trainers.backend.config import TorchBackendConfig
from trainers.backend.micro_batches import select_rows, split_by_token_budget

LR = 1e-5
TRANSFORMERS_BUDGETS = (1024, 2048, 4096)
"""Transformers' micro-batch budgets (padded tokens), all timed: its fastest differs by shape (on the 2-core VM,
1024 on the long-tail one, 1024-2048 on the default one)."""


def median_seconds(step: Callable[[], None], steps: int) -> float:
    """Median wall time of `steps` calls after one warm-up call."""
    return interleaved_medians([step], steps)[0]


def interleaved_medians(runs: list[Callable[[], None]], steps: int) -> list[float]:
    """Median wall time of each of `runs`, called in turn `steps` times after one warm-up call each, so that a
    noisy neighbour on the machine slows all of them alike."""
    for run in runs:
        run()
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(steps):
        for run, out in zip(runs, times, strict=True):
            t0 = time.perf_counter()
            run()
            out.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def ours_step(model: MoEForCausalLM, batch: TrainBatch, max_new_tokens: int) -> Callable[[], None]:
    backend = TorchBackend(model, OptimConfig(lr=LR), device="cpu", experts_kernel=TorchBackendConfig().experts_kernel)
    algorithm = build_algorithm(PPOConfig(), max_new_tokens=max_new_tokens)
    loop = TrainLoopConfig()
    return lambda: train_step(backend, algorithm, batch, loop)


def transformers_step(checkpoint: Path, batch: TrainBatch, budget: int) -> Callable[[], None]:
    """Transformers' step on `batch` in micro-batches of at most `budget` padded tokens."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).train()
    if budget == TRANSFORMERS_BUDGETS[0]:
        impl = (model.config._attn_implementation, getattr(model.config, "_experts_implementation", None))
        print(f"  transformers {type(model).__name__}: attention {impl[0]}, experts {impl[1]}", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    lengths = batch.seq_lengths.tolist()
    micro = [select_rows(batch, rows) for rows in split_by_token_budget(lengths, range(batch.batch_size), budget)]
    ppo = PPOConfig()
    low, high = 1 - ppo.clip_low, 1 + ppo.clip_high
    advantages = torch.randn(batch.batch_size, generator=torch.Generator().manual_seed(0))
    total_tokens = float(batch.response_mask.sum())

    def step() -> None:
        for mb in micro:
            logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]  # [b, t-1, V]
            log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, mb.input_ids[:, 1:, None]).squeeze(-1)
            ratio = torch.exp(log_probs - mb.rollout_log_probs)
            adv = advantages[: mb.batch_size, None]
            surrogate = torch.minimum(ratio * adv, ratio.clamp(low, high) * adv)  # our clip range
            loss = -(surrogate * mb.response_mask).sum() / total_tokens
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def flops_per_token(model: MoEForCausalLM) -> float:
    """Training matmul FLOPs per token: 6 x the parameters a token multiplies (active experts only, no embedding)."""
    cfg = model.config
    d, h, kv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    attention = cfg.hidden_size * (h * d + 2 * kv * d) + h * d * cfg.hidden_size
    moe = cfg.num_experts * cfg.hidden_size + cfg.num_experts_per_tok * 3 * cfg.hidden_size * cfg.moe_intermediate_size
    dense = 3 * cfg.hidden_size * cfg.intermediate_size
    layers = sum(attention + (moe if cfg.is_moe_layer(i) else dense) for i in range(cfg.num_hidden_layers))
    return 6.0 * (layers + cfg.hidden_size * cfg.vocab_size)


def peak_gflops(n: int = 2048, reps: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    seconds = median_seconds(lambda: torch.mm(a, b), reps)
    return 2 * n**3 / seconds / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="timed steps per side and shape (median, after one warm-up)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: the apps' trainer default)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    peak = peak_gflops()
    print(f"peak: {peak:.1f} GFLOP/s (float32 2048^3 matmul, {args.threads} thread(s))", flush=True)
    shapes = benchmark_shapes(make_model(), shared_prompts=True)  # a group's samples share their prompt
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "ckpt"
        save_pretrained(make_model(), checkpoint)
        for name, (batch, max_new) in shapes.items():
            tokens = int(batch.attention_mask.sum())
            print(f"{name}: {batch.batch_size} rows, {tokens} tokens", flush=True)
            ours_model = make_model()
            runs = [ours_step(ours_model, batch, max_new)]
            runs += [transformers_step(checkpoint, batch, budget) for budget in TRANSFORMERS_BUDGETS]
            ours, *each = (tokens / sec for sec in interleaved_medians(runs, args.steps))
            theirs = max(each)
            share = 100 * ours * flops_per_token(ours_model) / (peak * 1e9)
            budgets = "  ".join(f"{b}: {t:.0f}" for b, t in zip(TRANSFORMERS_BUDGETS, each, strict=True))
            print(f"  transformers tokens/s by micro-batch budget  {budgets}", flush=True)
            print(
                f"  ours {ours:8.0f} tokens/s  transformers {theirs:8.0f} tokens/s  ({ours / theirs:.2f}x)", flush=True
            )
            summary.append(
                f"{name}: train tokens/s ours {ours:.0f} vs transformers {theirs:.0f} ({ours / theirs:.2f}x)  "
                f"peak {peak:.1f} GFLOP/s  ours {share:.2f}% of peak"
            )
    print("\n".join(summary))


if __name__ == "__main__":
    main()
