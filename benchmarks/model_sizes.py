"""What a step costs as the model grows: the tiny, small and base presets (Qwen3-MoE; small and base at production
proportions and vocabulary: a 151,936-row embedding, the tokenizer's 151,669 ids scored), random weights.

For each size, each measurement in a fresh process of its own (so each side's peak RSS is its own):
- train: our `train_step` at the apps' defaults against transformers' step on the same GRPO batch (the apps' default
  shape: 32 prompts x 8 samples sharing their prompt, prompts of 10-16 tokens, responses of 4-12), the step TRL's
  GRPOTrainer runs: transformers' forward with `logits_to_keep` (the completions' logits only), its selective
  log-softmax (a gather minus a per-row logsumexp), a token-mean clipped-ratio loss, backward, one fused AdamW step
  (TRL's default optimiser) per batch, at each of `--budgets` padded tokens a micro-batch, its fastest counting.
  Tokens/s counts every real token of the batch; peak MB is the process's peak RSS;
- push: the trainer's weights to a rollout engine, in this process (`export_weights` + `NativeEngine.push`, as
  sync_ppo) and to a Ray actor (`RayWeightSync` through the object store, as async_ppo: the median of 8 pushes;
  a fresh object store's memory takes page faults on first use, so a run's first pushes are slower), as a share of
  our step;
  and the backend's checkpoint save;
- generation: the native engine's RL-shaped generation (`--gen-prompts` prompts at once, response lengths drawn from
  8..`--gen-tokens`, temperature 1) against transformers' `generate` on the same prompts and lengths (each batch
  decoding to its longest row; both credited with the drawn lengths only);
- at `small`, a long-response shape too: 4 samples of one prompt with 4,096-token responses.
Writes `docs/model_sizes.png` (time per trained token and peak memory against total parameters).

Run: `uv run python benchmarks/model_sizes.py [--sizes tiny,small,base] [--steps 2] [--threads 2]` (`--push-only`: the
push alone). Last lines, two
per size:
`<size>: params <total>M active <active>M vocab <V>  train tokens/s ours <a> vs transformers <b> (<r>x)  peak MB ours <m> vs transformers <t>  push <p>% of step`
`<size> generation: tokens/s ours <g> vs transformers generate <h> (<x>x)`
Active parameters are those a token multiplies: attention, router, its top-k experts and the head (the scored
vocabulary's rows), not the embedding (a lookup).
"""  # noqa: E501

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from trainers.algorithm.build import build_algorithm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backend_step_time import make_batch

ROOT = Path(__file__).resolve().parents[1]
TINY_VOCAB = 48  # the tiny preset's rows, as the train benchmarks give it (a task's own tokenizer: ~40-100)
FULL_ROWS, FULL_TOKENS = 151_936, 151_669


def model(size: str) -> Any:
    from moe_models import MoEConfig, MoEForCausalLM

    torch.manual_seed(0)
    if size == "tiny":
        return MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=TINY_VOCAB, pad_token_id=0))
    cfg = MoEConfig.preset(size, vocab_size=FULL_ROWS, pad_token_id=0, tokenizer_vocab_size=FULL_TOKENS)
    return MoEForCausalLM(cfg)


def params_m(m: Any) -> tuple[float, float]:
    """(total, active) parameters in millions (see the module docstring)."""
    cfg = m.config
    per_layer_attention = sum(p.numel() for p in m.model.layers[0].self_attn.parameters())
    moe = cfg.num_experts * cfg.hidden_size + cfg.num_experts_per_tok * 3 * cfg.hidden_size * cfg.moe_intermediate_size
    dense = 3 * cfg.hidden_size * cfg.intermediate_size
    layers = sum(per_layer_attention + (moe if cfg.is_moe_layer(i) else dense) for i in range(cfg.num_hidden_layers))
    return m.num_parameters() / 1e6, (layers + cfg.hidden_size * cfg.logit_vocab_size) / 1e6


def batch_for(m: Any, shape: str) -> Any:
    if shape == "long":
        return make_batch(m, 1, 4, [4096] * 4, shared_prompts=True)
    return make_batch(m, 32, 8, shared_prompts=True)  # the apps' default shape


def median_step(step: Callable[[], None], steps: int) -> float:
    step()  # warm-up
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ours(size: str, shape: str, steps: int) -> dict[str, float]:
    from trainers import TrainLoopConfig, train_step
    from trainers.algorithm import PPOConfig
    from trainers.backend import OptimConfig, TorchBackend
    from trainers.backend.config import TorchBackendConfig

    m = model(size)
    batch = batch_for(m, shape)
    backend = TorchBackend(m, OptimConfig(lr=1e-5), device="cpu", experts_kernel=TorchBackendConfig().experts_kernel)
    algorithm = build_algorithm(PPOConfig(), max_new_tokens=int(batch.response_mask.sum(1).max()))
    out = {"step_s": median_step(lambda: train_step(backend, algorithm, batch, TrainLoopConfig()), steps)}
    out |= {"tokens": float(batch.attention_mask.sum()), "peak_mb": peak_mb()}
    if shape == "long":
        return out
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        backend.state_dict().save(tmp)
        out["save_s"] = time.perf_counter() - t0
    out["push_s"] = local_push_seconds(backend)
    return out


def run_local_push(size: str) -> dict[str, float]:
    """`local_push_seconds` of a freshly built backend (no step taken)."""
    from trainers.backend import OptimConfig, TorchBackend

    backend = TorchBackend(model(size), OptimConfig(lr=1e-5), device="cpu")
    return {"push_s": local_push_seconds(backend)}


def local_push_seconds(backend: Any) -> float:
    """`export_weights` -> `NativeEngine.push` (pause, load, resume) of the backend's weights, in this process (as
    sync_ppo pushes)."""
    from engine_adapters.native import NativeEngine
    from moe_models import MoEForCausalLM

    engine = NativeEngine(MoEForCausalLM(backend.model.config).eval(), max_len=64, slots=4)

    async def push() -> None:
        weights, version = backend.export_weights()
        await engine.push(weights, version, "abort")

    asyncio.run(push())  # warm-up
    t0 = time.perf_counter()
    asyncio.run(push())
    return time.perf_counter() - t0


def run_transformers(size: str, shape: str, steps: int, budget: int) -> dict[str, float]:
    from moe_models import save_pretrained
    from transformers import AutoModelForCausalLM

    m = model(size)
    batch = batch_for(m, shape)
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(m, tmp)
        del m
        hf = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).train()
    step = trl_step(hf, batch, budget)
    return {"step_s": median_step(step, steps), "tokens": float(batch.attention_mask.sum()), "peak_mb": peak_mb()}


def trl_step(hf: Any, batch: Any, budget: int) -> Callable[[], None]:
    """TRL GRPOTrainer's policy step on `batch` in micro-batches of at most `budget` padded tokens."""
    from trainers.backend.micro_batches import select_rows, split_by_token_budget

    optimizer = torch.optim.AdamW(hf.parameters(), lr=1e-5, fused=True)  # TRL's default: adamw_torch_fused
    rows = split_by_token_budget(batch.seq_lengths.tolist(), range(batch.batch_size), budget)
    micro = [select_rows(batch, r) for r in rows]
    advantages = torch.randn(batch.batch_size, generator=torch.Generator().manual_seed(0))
    total = float(batch.response_mask.sum())
    vocab = FULL_TOKENS if hf.config.vocab_size == FULL_ROWS else hf.config.vocab_size

    def step() -> None:
        for mb in micro:
            keep = int(mb.input_ids.shape[1] - mb.prompt_lengths.min())  # the completions' positions, padded
            logits = hf(input_ids=mb.input_ids, attention_mask=mb.attention_mask, logits_to_keep=keep + 1).logits
            logits = logits[:, :-1, :vocab]  # [b, keep, V]: row t scores token t + 1
            ids = mb.input_ids[:, -keep:]
            picked = logits.gather(-1, ids[..., None]).squeeze(-1)
            log_probs = picked - torch.stack([torch.logsumexp(row, dim=-1) for row in logits])  # selective
            ratio = torch.exp(log_probs - mb.rollout_log_probs[:, -keep:])
            adv = advantages[: mb.batch_size, None]
            surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.28) * adv)
            (-(surrogate * mb.response_mask[:, -keep:]).sum() / total).backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def run_ray_push(size: str) -> dict[str, float]:
    """publish (the trainer's process) -> an actor's fetch and `NativeEngine.push`, through Ray's object store."""
    import ray
    from async_pipeline.ray_session.config import RayConfig
    from async_pipeline.ray_session.session import LocalRay
    from async_pipeline.ray_session.weight_sync import RayWeightSync

    local = LocalRay.start(RayConfig(temp_dir=f"/tmp/model_sizes_ray_{size}"), num_cpus=2, log_to_driver=False)
    try:
        actor = ray.remote(_EngineActor).options(num_cpus=1).remote(size)
        ray.get(actor.ready.remote())
        weights = {k: v.detach().clone() for k, v in model(size).state_dict().items()}
        sync = RayWeightSync()
        seconds = []
        for version in range(1, 9):
            t0 = time.perf_counter()
            ray.get(actor.push.remote(sync.publish(weights, version)))
            seconds.append(time.perf_counter() - t0)
        # a fresh object store's shared memory takes page faults on first use: the first pushes are the slow ones
        return {"ray_push_s": statistics.median(seconds), "ray_first_push_s": seconds[0]}
    finally:
        local.stop()


class _EngineActor:
    def __init__(self, size: str) -> None:
        from async_pipeline.ray_session.weight_sync import RayWeightSync
        from engine_adapters.native import NativeEngine

        torch.set_num_threads(1)
        self.engine = NativeEngine(model(size).eval(), max_len=64, slots=4)
        self.sync = RayWeightSync()

    def ready(self) -> bool:
        return True

    async def push(self, handle: Any) -> int:
        await self.engine.push(await self.sync.fetch_async(handle), handle.version, "abort")
        return self.engine.weight_version


def run_generation(size: str, prompts: int, max_tokens: int, threads: int) -> dict[str, float]:
    """Useful tokens/s of the native engine (all requests at once, `prompts` slots) and of transformers' `generate`
    (batches of `prompts` rows, each decoding to its longest), on the same 2 x `prompts` prompts and drawn lengths."""
    import numpy as np
    from engine_adapters.native import NativeEngine
    from moe_models import save_pretrained
    from rollout_core import SamplingParams
    from transformers import AutoModelForCausalLM

    m = model(size).eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(1, TINY_VOCAB, size=(2 * prompts, 16)).tolist()
    lengths = rng.integers(8, max_tokens + 1, size=2 * prompts).tolist()
    engine = NativeEngine(m, slots=prompts, max_len=16 + max_tokens, eos_token_ids=(), step_threads=threads)
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(m, tmp)
        hf = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    vocab = FULL_TOKENS if m.config.vocab_size == FULL_ROWS else m.config.vocab_size
    padding = list(range(vocab, m.config.vocab_size))  # transformers samples the tokenizer's ids too

    async def native() -> None:
        base = SamplingParams(max_new_tokens=1, temperature=1.0)
        calls = [engine.generate(f"g{i}", p, base.replace(max_new_tokens=n, seed=i)) for i, (p, n) in
                 enumerate(zip(ids, lengths, strict=True))]  # fmt: skip
        await asyncio.gather(*calls)

    def generate() -> None:
        for start in range(0, len(ids), prompts):
            batch, longest = torch.tensor(ids[start : start + prompts]), max(lengths[start : start + prompts])
            with torch.inference_mode():
                hf.generate(batch, attention_mask=torch.ones_like(batch), max_new_tokens=longest,
                            min_new_tokens=longest, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                            pad_token_id=0, suppress_tokens=padding or None)  # fmt: skip

    torch.set_num_threads(threads)
    ours = median_step(lambda: asyncio.run(native()), 1)
    theirs = median_step(generate, 1)
    useful = float(sum(lengths))
    return {"ours_tok_s": useful / ours, "transformers_tok_s": useful / theirs}


def in_process(fn: Callable[..., dict[str, float]], *args: Any) -> dict[str, float]:
    """`fn(*args)` in a fresh process (its own peak RSS and allocator), its dict back."""
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="tiny,small,base", help="comma-separated presets")
    p.add_argument("--steps", type=int, default=2, help="timed train steps per side (median, after one warm-up)")
    p.add_argument("--threads", type=int, default=2, help="torch threads of every side")
    p.add_argument("--budgets", default="1024,2048,4096", help="transformers' micro-batch budgets (its fastest counts)")
    p.add_argument("--gen-prompts", type=int, default=32, help="generation: prompts at once (the engine's slots)")
    p.add_argument("--gen-tokens", type=int, default=64, help="generation: the longest drawn response")
    p.add_argument("--push-only", action="store_true", help="only the weight push (in process and to a Ray actor)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    budgets = [int(b) for b in args.budgets.split(",")]
    if args.push_only:
        for size in args.sizes.split(","):
            local, ray = in_process(run_local_push, size), run_ray_push(size)
            print(
                f"{size} push: {local['push_s']:.2f} s in process, {ray['ray_push_s']:.2f} s to a Ray actor "
                f"(median of 8 pushes; the first {ray['ray_first_push_s']:.2f} s)"
            )
        return
    rows: list[dict[str, Any]] = []
    for size in args.sizes.split(","):
        rows.append(measure(size, args, budgets))
        if size == "small":
            long_shape(args, budgets)
    plot(rows)
    for r in rows:
        ours, theirs = r["ours_tok_s"], r["theirs_tok_s"]
        print(
            f"{r['size']}: params {r['total_m']:.0f}M active {r['active_m']:.1f}M vocab {r['vocab']}  train tokens/s "
            f"ours {ours:.0f} vs transformers {theirs:.0f} ({ours / theirs:.2f}x)  peak MB ours {r['ours_mb']:.0f} vs "
            f"transformers {r['theirs_mb']:.0f}  push {100 * r['push_share']:.1f}% of step"
        )
        print(
            f"{r['size']} generation: tokens/s ours {r['gen_ours']:.0f} vs transformers generate {r['gen_theirs']:.0f} "
            f"({r['gen_ours'] / r['gen_theirs']:.2f}x)"
        )


def measure(size: str, args: argparse.Namespace, budgets: list[int]) -> dict[str, Any]:
    torch.manual_seed(0)
    total, active = params_m(model(size))
    ours = in_process(run_ours, size, "default", args.steps)
    theirs = {b: in_process(run_transformers, size, "default", args.steps, b) for b in budgets}
    best = min(theirs, key=lambda b: theirs[b]["step_s"])
    ray = run_ray_push(size)
    gen = in_process(run_generation, size, args.gen_prompts, args.gen_tokens, args.threads)
    push = max(ours["push_s"], ray["ray_push_s"])
    print(
        f"{size}: ours {ours['step_s']:.2f} s/step ({ours['peak_mb']:.0f} MB), transformers by budget "
        + "  ".join(f"{b}: {t['step_s']:.2f} s ({t['peak_mb']:.0f} MB)" for b, t in theirs.items())
        + f"; push {ours['push_s']:.2f} s in process, {ray['ray_push_s']:.2f} s to a Ray actor (the first "
        f"{ray['ray_first_push_s']:.2f} s); checkpoint save "
        f"{ours['save_s']:.2f} s",
        flush=True,
    )
    return {
        "size": size, "total_m": total, "active_m": active,
        "vocab": FULL_TOKENS if size != "tiny" else TINY_VOCAB,
        "ours_tok_s": ours["tokens"] / ours["step_s"], "theirs_tok_s": theirs[best]["tokens"] / theirs[best]["step_s"],
        "ours_mb": ours["peak_mb"], "theirs_mb": theirs[best]["peak_mb"], "push_share": push / ours["step_s"],
        "gen_ours": gen["ours_tok_s"], "gen_theirs": gen["transformers_tok_s"],
    }  # fmt: skip


def long_shape(args: argparse.Namespace, budgets: list[int]) -> None:
    ours = in_process(run_ours, "small", "long", args.steps)
    theirs = [in_process(run_transformers, "small", "long", args.steps, b) for b in budgets]
    best = min(theirs, key=lambda t: t["step_s"])
    a, b = ours["tokens"] / ours["step_s"], best["tokens"] / best["step_s"]
    print(
        f"small long (4 x 4096-token responses): train tokens/s ours {a:.0f} vs transformers {b:.0f} ({a / b:.2f}x)  "
        f"peak MB ours {ours['peak_mb']:.0f} vs transformers {best['peak_mb']:.0f}",
        flush=True,
    )


def plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    total = [r["total_m"] for r in rows]
    fig, (time_ax, mem_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("ours_tok_s", "ours"), ("theirs_tok_s", "transformers (TRL's step)")):
        time_ax.plot(total, [1e3 / r[key] for r in rows], marker="o", label=label)
    for key, label in (("ours_mb", "ours"), ("theirs_mb", "transformers (TRL's step)")):
        mem_ax.plot(total, [r[key] for r in rows], marker="o", label=label)
    for ax, ylabel in ((time_ax, "ms per trained token"), (mem_ax, "peak RSS of the train step (MB)")):
        ax.set(xscale="log", yscale="log", xlabel="total parameters (M)", ylabel=ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("benchmarks/model_sizes.py: " + ", ".join(r["size"] for r in rows))
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "model_sizes.png", dpi=110)


if __name__ == "__main__":
    main()
