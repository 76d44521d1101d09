"""Times the native engine's cached decode steps (`engine_adapters.native.decode.CachedModel.forward`) for 64 slots on
the tiny preset (CPU, fp32).

Prints decode tokens/s (overall, median step, fastest step) and, as a peer measured in the same run, the
uncached `forward` over the same contexts (one full re-forward per generated token), with the ratio.
Run: uv run python benchmarks/moe_decode_step.py [--slots 64] [--prompt-len 32] [--steps 128] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from engine_adapters.native.decode import CachedModel, KVCache
from moe_models import MoEConfig, MoEForCausalLM


def _decode_step_seconds(cached: CachedModel, slots: int, prompt_len: int, steps: int, max_len: int) -> list[float]:
    """Wall time of each batched decode step (all slots, one token each, routing captured). max_len: the cache's
    (the compiled graph is specialised on it, so the warm-up uses the measured run's)."""
    cfg = cached.model.config
    cache = KVCache(cfg, num_slots=slots, max_len=max_len)
    prompts = torch.randint(0, cfg.vocab_size, (slots * prompt_len,))
    slot_ids = torch.arange(slots)
    logits, _ = cached.forward(prompts, slot_ids, [prompt_len] * slots, cache)
    tokens = logits.argmax(-1)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        logits, _ = cached.forward(tokens, slot_ids, [1] * slots, cache, capture_routing=True)
        tokens = logits.argmax(-1)
        times.append(time.perf_counter() - start)
    return times


def _uncached_tokens_per_s(model: MoEForCausalLM, slots: int, prompt_len: int, steps: int) -> float:
    ids = torch.randint(0, model.config.vocab_size, (slots, prompt_len))
    start = time.perf_counter()
    for _ in range(steps):
        logits = model(ids).logits[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return slots * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=128)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads; >1 starves on a shared 2-core box"
    )
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile the decode step (CachedModel(compiled=True))"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=args.vocab_size)).eval()
    cached = CachedModel(model, compiled=args.compile)
    with torch.inference_mode():
        max_len = args.prompt_len + args.steps + 1
        _decode_step_seconds(cached, args.slots, args.prompt_len, 4, max_len)  # warm-up (compiles with --compile)
        steps = _decode_step_seconds(cached, args.slots, args.prompt_len, args.steps, max_len)
        uncached = _uncached_tokens_per_s(model, args.slots, args.prompt_len, max(4, args.steps // 8))
    cached_rate = args.slots * len(steps) / sum(steps)
    print(
        f"tiny preset ({model.num_parameters() / 1e6:.2f}M params), {args.slots} slots, prompt {args.prompt_len}, "
        f"{args.steps} decode steps, {torch.get_num_threads()} threads"
    )
    print(
        f"cached decode: {cached_rate:,.0f} tok/s overall, {args.slots / statistics.median(steps):,.0f} at the "
        f"median step, {args.slots / min(steps):,.0f} at the fastest step (a shared CPU shows in the gap)"
    )
    print(f"uncached forward: {uncached:,.0f} tok/s  (cached/uncached = {cached_rate / uncached:.1f}x)")


if __name__ == "__main__":
    main()
