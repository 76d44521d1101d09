"""Native engine vs `transformers` `generate` on the same tiny MoE weights, interleaved in one process.

(a) fixed: P prompts of 32 tokens (P = engine slots = generate's batch), 128 new tokens each, EOS ignored;
(b) rl-shaped: W waves of P prompts with response lengths drawn from 8..128, all submitted at once. The engine
    keeps its P slots busy (a request that finishes frees its slot for a waiting one); `generate` runs the W
    batches of P one after the other, each decoding every row to the batch's longest length. Both sides are
    credited only with the useful tokens (sum of the drawn lengths). `(b1)` is the same with one wave (W = 1):
    nothing waits, so the engine's batch shrinks as rows finish;
(c) update: wall time of `pause("keep") -> update_weights(numpy state) -> resume()` with every slot busy;
(d) prefill: (b)'s W x P prompts with one new token each, so both sides do little but prefill them (the engine in
    its slots, chunked as its scheduler admits them; `generate` in its W batches); reported in prompt tokens/s.
Both sides sample at temperature 1 with no top-k/top-p. The native engine runs 1 torch thread (`--threads`); its
compiled step's C kernels split their work over `--kernel-threads` (that thread and helpers); `generate` is measured
at each of `--generate-threads` torch threads in every repetition and the faster one is its rate (its best use of
the same cores). The native engine also computes per-token log-probs and captures routing; `generate` does neither.
By default the engine's decode step is compiled (`EngineConfig.compile_decode`, compiled once during the warm-up);
`--no-compile` measures the eager engine. Each measurement is repeated `--reps` times, the two sides back to back;
ratios are medians of the per-repetition ratios (robust to the load of a shared machine drifting); ratios by process
CPU time are printed too. The last line is `fixed <r_a>x  rl-shaped <r_b>x  prefill <r_d>x  update <seconds>s`
(ratios = native tokens/s over generate tokens/s).
With `--vllm`, a vLLM CPU server (`.vllm-env`, scripts/setup_vllm_env.sh) serves the same weights and runs (a)
and (b) over HTTP in the same repetitions (log-probs and routing capture on; it stops at a sampled EOS, so it is
credited with the tokens it returned); native/vLLM ratios are printed before the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from engine_adapters.native import NativeEngine
    from engine_adapters.vllm import VLLMServer
    from transformers import Qwen3MoeForCausalLM


@dataclass(frozen=True)
class BenchConfig:
    prompts: int
    prompt_len: int
    new_tokens: int
    min_new_tokens: int
    waves: int
    reps: int
    threads: int
    generate_threads: tuple[int, ...]
    kernel_threads: int
    compile_decode: bool
    decode_burst: int
    vocab_size: int
    seed: int
    vllm: bool


def parse_args() -> BenchConfig:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=64, help="prompts per batch (= engine slots)")
    p.add_argument("--prompt-len", type=int, default=32, help="tokens per prompt")
    p.add_argument("--new-tokens", type=int, default=128, help="new tokens per prompt in (a); max in (b)")
    p.add_argument("--min-new-tokens", type=int, default=8, help="shortest drawn response in (b)")
    p.add_argument("--waves", type=int, default=4, help="batches of prompts submitted at once in (b)")
    p.add_argument("--reps", type=int, default=3, help="repetitions of every measurement (median reported)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the native engine")
    p.add_argument(
        "--generate-threads",
        default="1,2",
        help="comma-separated torch thread counts `generate` is measured at; the fastest is its rate",
    )
    p.add_argument(
        "--kernel-threads",
        type=int,
        default=2,
        help="EngineConfig.kernel_threads: threads of the compiled step's C kernels (the caller and helpers)",
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compile the native engine's decode step (EngineConfig.compile_decode; --no-compile: the eager engine)",
    )
    p.add_argument(
        "--decode-burst",
        type=int,
        default=64,
        help="EngineConfig.decode_burst: decode steps per worker-thread call (1 = one thread hop per token)",
    )
    p.add_argument("--vllm", action="store_true", help="also measure a vLLM CPU server on the same weights")
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    return BenchConfig(
        a.prompts,
        a.prompt_len,
        a.new_tokens,
        a.min_new_tokens,
        a.waves,
        a.reps,
        a.threads,
        tuple(int(t) for t in a.generate_threads.split(",")),
        a.kernel_threads,
        a.compile,
        a.decode_burst,
        a.vocab_size,
        a.seed,
        a.vllm,
    )


@dataclass
class Workload:
    """Prompts (a multiple of the engine's slots, run by `generate` in batches of that size) and new tokens each."""

    prompts: list[list[int]]
    lengths: list[int]

    def batches(self, size: int) -> list[Workload]:
        return [
            Workload(self.prompts[i : i + size], self.lengths[i : i + size]) for i in range(0, len(self.prompts), size)
        ]

    @property
    def useful(self) -> int:
        return sum(self.lengths)


@dataclass
class Bench:
    """Both sides' models on the same weights, and the workloads."""

    cfg: BenchConfig
    engine: NativeEngine
    hf: Qwen3MoeForCausalLM
    fixed: Workload  # (a): one wave, every row `new_tokens` long
    shaped: Workload  # (b): `waves` waves, drawn lengths
    one_wave: Workload  # (b1): the first wave of (b)
    prefill: Workload  # (d): (b)'s prompts, one new token each
    pushed: dict[str, np.ndarray]  # the state dict pushed in (c)


def build(cfg: BenchConfig) -> Bench:
    import numpy as np
    import torch
    from engine_adapters.native import NativeEngine
    from moe_models import MoEConfig, MoEForCausalLM, save_pretrained, state_dict_numpy
    from transformers import Qwen3MoeForCausalLM

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=cfg.vocab_size)).eval()  # no EOS: never stops
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, tmp)
        hf = Qwen3MoeForCausalLM.from_pretrained(tmp).eval()
    engine = NativeEngine(
        model,
        slots=cfg.prompts,
        max_len=cfg.prompt_len + cfg.new_tokens,
        eos_token_ids=(),
        compile_decode=cfg.compile_decode,
        kernel_threads=cfg.kernel_threads,
        decode_burst=cfg.decode_burst,
        step_threads=cfg.threads,
    )
    rng = np.random.default_rng(cfg.seed)
    prompts = rng.integers(0, cfg.vocab_size, size=(cfg.waves * cfg.prompts, cfg.prompt_len)).tolist()
    drawn = rng.integers(cfg.min_new_tokens, cfg.new_tokens + 1, size=len(prompts)).tolist()
    shaped = Workload(prompts, drawn)
    return Bench(
        cfg=cfg,
        engine=engine,
        hf=hf,
        fixed=Workload(prompts[: cfg.prompts], [cfg.new_tokens] * cfg.prompts),
        shaped=shaped,
        one_wave=shaped.batches(cfg.prompts)[0],
        prefill=Workload(prompts, [1] * len(prompts)),
        pushed={k: v * 1.01 if v.dtype.kind == "f" else v for k, v in state_dict_numpy(model).items()},
    )


@dataclass(frozen=True)
class Rate:
    """Useful tokens per second of wall time, and per second of this process's CPU time (all threads)."""

    wall: float
    cpu: float
    threads: int = 0  # generate: the torch thread count it ran at


def _rate(tokens: int, wall0: float, cpu0: float) -> Rate:
    return Rate(tokens / (time.perf_counter() - wall0), tokens / (time.process_time() - cpu0))


async def native_tok_s(b: Bench, work: Workload) -> Rate:
    """Useful tokens per second of the native engine for all of `work` submitted at once."""
    from rollout_core import SamplingParams

    base = SamplingParams(max_new_tokens=1, temperature=1.0)
    calls = [
        b.engine.generate(f"b{i}", p, base.replace(max_new_tokens=n, seed=i))
        for i, (p, n) in enumerate(zip(work.prompts, work.lengths, strict=True))
    ]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    segs = await asyncio.gather(*calls)
    rate = _rate(work.useful, wall0, cpu0)
    assert [len(s.token_ids) for s in segs] == work.lengths
    return rate


def generate_tok_s(b: Bench, work: Workload) -> Rate:
    """Useful tokens per second of `generate`, run on batches of `prompts` rows one after the other (each batch
    decodes every row to its longest length)."""
    import torch

    wall0, cpu0 = time.perf_counter(), time.process_time()
    for batch in work.batches(b.cfg.prompts):
        ids = torch.tensor(batch.prompts)
        longest = max(batch.lengths)
        with torch.inference_mode():
            out = b.hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=longest,
                min_new_tokens=longest,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                pad_token_id=0,
            )
        assert out.shape == (len(batch.prompts), b.cfg.prompt_len + longest)
    return _rate(work.useful, wall0, cpu0)  # useful tokens only


async def update_seconds(b: Bench, version: int) -> float:
    """Wall time of pause("keep") -> update_weights -> resume while every slot is decoding."""
    from rollout_core import SamplingParams

    params = SamplingParams(max_new_tokens=b.cfg.new_tokens, temperature=1.0)
    tasks = [asyncio.create_task(b.engine.generate(f"u{i}", p, params)) for i, p in enumerate(b.fixed.prompts)]
    target = b.engine.metrics().generated_tokens + 4 * b.cfg.prompts
    while b.engine.metrics().generated_tokens < target:
        await asyncio.sleep(0.001)
    t0 = time.perf_counter()
    await b.engine.pause("keep")
    await b.engine.update_weights(b.pushed, version)
    await b.engine.resume()
    seconds = time.perf_counter() - t0
    segs = await asyncio.gather(*tasks)
    assert all(s.versions()[-1] == version and s.versions()[0] < version for s in segs)
    return seconds


@dataclass
class Results:
    """Per repetition: (native, generate) rates of (a), (b) and (b1), and the update time of (c)."""

    fixed: list[tuple[Rate, Rate]]
    shaped: list[tuple[Rate, Rate]]
    one_wave: list[tuple[Rate, Rate]]
    prefill: list[tuple[Rate, Rate]]  # rates in new tokens (one per prompt): x prompt_len for prompt tokens/s
    update: list[float]
    vllm_fixed: list[float]  # vLLM tokens/s (wall), same repetitions; empty without --vllm
    vllm_shaped: list[float]

    def ratio(self, pairs: list[tuple[Rate, Rate]], clock: str) -> float:
        """Median over repetitions of native / generate, each pair measured back to back."""
        return statistics.median(getattr(n, clock) / getattr(g, clock) for n, g in pairs)


def report(b: Bench, r: Results) -> None:
    compiled = b.engine.decode_compiled
    mode = "compiled" if compiled else "eager"
    attention = f", C kernels on {b.cfg.kernel_threads} thread(s)" if compiled else ""
    print(
        f"native engine: {mode} decode step, decode_burst {b.cfg.decode_burst}, {b.cfg.threads} torch thread(s)"
        f"{attention}; generate: the faster of {', '.join(map(str, b.cfg.generate_threads))} torch thread(s)"
    )
    for name, pairs in (("(a) fixed", r.fixed), ("(b) rl-shaped", r.shaped), ("(b1) one wave", r.one_wave)):
        native = statistics.median(n.wall for n, _ in pairs)
        hf = statistics.median(g.wall for _, g in pairs)
        print(
            f"{name}: native {native:.0f} tok/s, generate {hf:.0f} useful tok/s (wall medians); ratio "
            f"{r.ratio(pairs, 'wall'):.2f}x by wall time, {r.ratio(pairs, 'cpu'):.2f}x by process CPU time"
        )
    for name, work in (("(b)", b.shaped), ("(b1)", b.one_wave)):
        decoded = sum(len(w.lengths) * max(w.lengths) for w in work.batches(b.cfg.prompts))
        print(f"    {name} useful tokens {work.useful} of the {decoded} that generate decodes")
    for name, pairs, peer in (("(a) fixed", r.fixed, r.vllm_fixed), ("(b) rl-shaped", r.shaped, r.vllm_shaped)):
        if peer:
            ratio = statistics.median(n.wall / v for (n, _), v in zip(pairs, peer, strict=True))
            print(f"{name}: vLLM CPU server {statistics.median(peer):.0f} tok/s; native/vLLM {ratio:.2f}x")
    per_prompt = b.cfg.prompt_len  # (d) credits one token per prompt: scale to the prompt tokens prefilled
    native = statistics.median(n.wall for n, _ in r.prefill) * per_prompt
    hf = statistics.median(g.wall for _, g in r.prefill) * per_prompt
    print(
        f"(d) prefill, {len(b.prefill.prompts)} prompts x {per_prompt} tokens: native {native:.0f} prompt tok/s, "
        f"generate {hf:.0f} (wall medians); ratio {r.ratio(r.prefill, 'wall'):.2f}x by wall time"
    )
    update_ms = 1e3 * statistics.median(r.update)
    print(f"(c) pause(keep) -> update_weights -> resume, {b.cfg.prompts} busy slots: {update_ms:.1f} ms")
    print(
        f"fixed {r.ratio(r.fixed, 'wall'):.2f}x  rl-shaped {r.ratio(r.shaped, 'wall'):.2f}x  "
        f"prefill {r.ratio(r.prefill, 'wall'):.2f}x  update {statistics.median(r.update):.3f}s"
    )


async def vllm_tok_s(url: str, work: Workload) -> float:
    """Tokens per second (wall) that a vLLM server returns for all of `work` sent at once over HTTP."""
    from engine_adapters.vllm import VLLMEngine
    from rollout_core import SamplingParams

    engine = await VLLMEngine.connect(url)
    try:
        base = SamplingParams(max_new_tokens=1, temperature=1.0)
        calls = [
            engine.generate(f"v{i}", p, base.replace(max_new_tokens=n, seed=i))
            for i, (p, n) in enumerate(zip(work.prompts, work.lengths, strict=True))
        ]
        t0 = time.perf_counter()
        segs = await asyncio.gather(*calls)
        return sum(len(s.token_ids) for s in segs) / (time.perf_counter() - t0)
    finally:
        await engine.close()


def launch_vllm(b: Bench, ckpt_dir: str) -> VLLMServer:
    from engine_adapters.vllm import VLLMServer, VLLMServerConfig
    from moe_models import save_pretrained

    save_pretrained(b.engine.model, ckpt_dir)
    cfg = VLLMServerConfig(
        model=ckpt_dir,
        max_num_seqs=b.cfg.prompts,
        max_model_len=b.cfg.prompt_len + b.cfg.new_tokens + 8,
        extra_args=("--skip-tokenizer-init",),
    )
    server = VLLMServer.launch(cfg)
    print(f"vLLM server up in {server.startup_s:.1f}s", flush=True)
    return server


def best_generate_tok_s(b: Bench, work: Workload) -> Rate:
    """`generate` at each of `--generate-threads` torch threads; the fastest (wall) run."""
    import torch

    runs = []
    for threads in b.cfg.generate_threads:
        torch.set_num_threads(threads)
        rate = generate_tok_s(b, work)
        runs.append(Rate(rate.wall, rate.cpu, threads))
    torch.set_num_threads(b.cfg.threads)
    return max(runs, key=lambda r: r.wall)


def _pair(b: Bench, work: Workload) -> tuple[Rate, Rate]:
    return asyncio.run(native_tok_s(b, work)), best_generate_tok_s(b, work)


def run_reps(b: Bench, url: str | None) -> Results:
    r = Results(fixed=[], shaped=[], one_wave=[], prefill=[], update=[], vllm_fixed=[], vllm_shaped=[])
    for rep in range(b.cfg.reps):
        r.fixed.append(_pair(b, b.fixed))
        r.shaped.append(_pair(b, b.shaped))
        r.one_wave.append(_pair(b, b.one_wave))
        r.prefill.append(_pair(b, b.prefill))
        if url is not None:
            r.vllm_fixed.append(asyncio.run(vllm_tok_s(url, b.fixed)))
            r.vllm_shaped.append(asyncio.run(vllm_tok_s(url, b.shaped)))
        r.update.append(asyncio.run(update_seconds(b, b.engine.weight_version + 1)))
        (na, ga), (nb, gb), (n1, g1) = r.fixed[-1], r.shaped[-1], r.one_wave[-1]
        peer = f"   vLLM {r.vllm_fixed[-1]:.0f} / {r.vllm_shaped[-1]:.0f} tok/s" if url is not None else ""
        print(
            f"rep {rep}: native / generate (its threads) tok/s: fixed {na.wall:.0f} / {ga.wall:.0f} ({ga.threads})   "
            f"rl-shaped {nb.wall:.0f} / {gb.wall:.0f} ({gb.threads})   one wave {n1.wall:.0f} / {g1.wall:.0f} "
            f"({g1.threads})   prefill {r.prefill[-1][0].wall:.0f} / {r.prefill[-1][1].wall:.0f} prompts/s   "
            f"update {r.update[-1] * 1e3:.1f} ms{peer}",
            flush=True,
        )
    return r


def main() -> None:
    cfg = parse_args()
    b = build(cfg)
    t0 = time.perf_counter()
    asyncio.run(native_tok_s(b, b.shaped))  # warm-up both sides (and compile, when asked)
    print(f"native warm-up (compiles the decode step with --compile): {time.perf_counter() - t0:.1f}s", flush=True)
    best_generate_tok_s(b, b.one_wave)
    with tempfile.TemporaryDirectory() as ckpt:
        server = launch_vllm(b, ckpt) if cfg.vllm else None
        try:
            if server is not None:
                asyncio.run(vllm_tok_s(server.base_url, Workload(b.fixed.prompts[:4], [8] * 4)))  # warm-up
            r = run_reps(b, server.base_url if server is not None else None)
        finally:
            if server is not None:
                server.stop()
    report(b, r)


if __name__ == "__main__":
    main()
