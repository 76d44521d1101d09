"""Rollout-vs-training log-prob mismatch of the native engine (eager and compiled decode), fp32.

The engine samples `--calls` responses (temperature 1, EOS ignored) from the tiny preset; the training forward
(`MoEForCausalLM.token_log_probs`) then scores the same tokens, once routing by itself and once replaying the
routing the engine captured (R3). Prints mean and max |engine log-prob - training log-prob| over all response
tokens, and the fraction of routing rows that differ when the trainer routes by itself.
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np
import torch
from engine_adapters.native import NativeEngine
from moe_models import MoEConfig, MoEForCausalLM, RouterReplay
from rollout_core import SamplingParams, Segment


def _generate(model: MoEForCausalLM, prompts: list[list[int]], new_tokens: int, compiled: bool) -> list[Segment]:
    engine = NativeEngine(model, slots=len(prompts), max_len=64 + new_tokens, eos_token_ids=(), compile_decode=compiled)
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0)

    async def main() -> list[Segment]:
        calls = [engine.generate(f"m{i}", p, params.replace(seed=i)) for i, p in enumerate(prompts)]
        return await asyncio.gather(*calls)

    return asyncio.run(main())


def _mismatch(model: MoEForCausalLM, prompt: list[int], seg: Segment, replay: bool) -> tuple[np.ndarray, float]:
    """|engine - trainer| per response token, and the fraction of routing rows the trainer chose differently."""
    ids = torch.tensor([prompt + seg.token_ids])
    rows = torch.from_numpy(seg.routed_experts.astype(np.int64))  # [T-1, L_moe, K] (N-1 convention)
    plan = None
    if replay:
        full = torch.zeros((1, ids.shape[1], *rows.shape[1:]), dtype=torch.int64)
        full[0, : len(rows)] = rows
        replayed = torch.zeros((1, ids.shape[1]), dtype=torch.bool)
        replayed[0, : len(rows)] = True
        plan = RouterReplay(ids=full, mask=replayed)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        lp, routed = model.token_log_probs(ids, mask, temperature=1.0, replay=plan, capture_routing=True)
    diff = np.abs(np.asarray(seg.log_probs) - lp[0, len(prompt) - 1 :].numpy())
    changed = float((routed[0, :-1] != rows).any(dim=-1).float().mean())
    return diff, changed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--calls", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    model = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=256)).eval()
    rng = np.random.default_rng(a.seed)
    prompts = [rng.integers(0, 256, size=int(n)).tolist() for n in rng.integers(8, 64, size=a.calls)]
    print(f"{a.calls} calls x {a.new_tokens} tokens, tiny preset, fp32")
    for compiled in (False, True):
        segs = _generate(model, prompts, a.new_tokens, compiled)
        for replay in (False, True):
            parts = [_mismatch(model, prompt, seg, replay) for prompt, seg in zip(prompts, segs, strict=True)]
            diff = np.concatenate([d for d, _ in parts])
            changed = np.mean([c for _, c in parts])
            print(
                f"{'compiled' if compiled else 'eager':8s} decode, {'replayed' if replay else 'own':8s} routing: "
                f"mean |dlogp| {diff.mean():.2e}, max {diff.max():.2e}, routing rows changed {changed:.2%}"
            )


if __name__ == "__main__":
    main()
