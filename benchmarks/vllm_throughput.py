"""vLLM CPU server through `engine_adapters.VLLMEngine`: tokens/s on tiny-preset MoE weights, and update time.

(a) generate: P concurrent requests (prompts of `--prompt-len` random ids, `--new-tokens` new tokens each, T=1)
    over HTTP, with log-probs and routed-expert capture (our worker extension); tokens/s counts the tokens
    actually returned (a sampled EOS ends a request early);
(b) update: wall time of `update_weights` (pause keep -> reload + CPU MoE re-pack -> version -> resume) while
    the same batch is generating.
Needs `.vllm-env` (scripts/setup_vllm_env.sh). Medians of `--reps` runs; the last line is
`vllm tokens/s <a>  update <b>s  startup <c>s`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine_adapters.vllm import VLLMEngine


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--routing", choices=["extension", "native", "none"], default="extension")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def write_checkpoints(root: Path, vocab_size: int, seed: int) -> tuple[Path, Path]:
    import torch
    from moe_models import MoEConfig, MoEForCausalLM, save_pretrained

    torch.manual_seed(seed)
    model = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=vocab_size)).eval()
    first = save_pretrained(model, root / "v0")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.01)
    return first, save_pretrained(model, root / "v1")


async def generate_batch(engine: VLLMEngine, prompts: list[list[int]], new_tokens: int, tag: str) -> int:
    from rollout_core import SamplingParams

    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0)
    segs = await asyncio.gather(*(engine.generate(f"{tag}-{i}", p, params) for i, p in enumerate(prompts)))
    return sum(len(s.token_ids) for s in segs)


async def measure(url: str, args: argparse.Namespace, v1: Path) -> tuple[list[float], list[float]]:
    import numpy as np
    from engine_adapters.vllm import VLLMEngine

    engine = await VLLMEngine.connect(url, routing=args.routing)
    rng = np.random.default_rng(args.seed)
    prompts = rng.integers(3, args.vocab_size, size=(args.prompts, args.prompt_len)).tolist()
    rates, updates = [], []
    try:
        await generate_batch(engine, prompts[:4], 8, "warm")
        for rep in range(args.reps):
            t0 = time.perf_counter()
            n = await generate_batch(engine, prompts, args.new_tokens, f"gen{rep}")
            rates.append(n / (time.perf_counter() - t0))
            busy = asyncio.create_task(generate_batch(engine, prompts, args.new_tokens, f"upd{rep}"))
            await asyncio.sleep(0.5)
            t0 = time.perf_counter()
            await engine.update_weights(str(v1), engine.weight_version + 1, pause_mode="keep")
            updates.append(time.perf_counter() - t0)
            await busy
            print(f"rep {rep}: {rates[-1]:.0f} tok/s ({n} tokens), update {updates[-1]:.3f} s", flush=True)
    finally:
        await engine.close()
    return rates, updates


def main() -> None:
    args = parse_args()
    from engine_adapters.vllm import VLLMServer, VLLMServerConfig

    with tempfile.TemporaryDirectory() as tmp:
        v0, v1 = write_checkpoints(Path(tmp), args.vocab_size, args.seed)
        cfg = VLLMServerConfig(
            model=str(v0),
            routing=args.routing,
            max_num_seqs=max(args.prompts, 1),
            max_model_len=args.prompt_len + args.new_tokens + 8,
            extra_args=("--skip-tokenizer-init",),
        )
        server = VLLMServer.launch(cfg)
        try:
            rates, updates = asyncio.run(measure(server.base_url, args, v1))
        finally:
            server.stop()
    print(
        f"vllm tokens/s {statistics.median(rates):.0f}  update {statistics.median(updates):.3f}s  "
        f"startup {server.startup_s:.1f}s"
    )


if __name__ == "__main__":
    main()
