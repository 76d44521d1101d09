"""Train-step time of the torch backend and the VeOmni or Megatron-Core backend at 1 and 2 ranks (gloo, one torch
thread per rank) on the same batch and weights: a default-shaped step of the apps (32 prompts x 8 samples, prompts
of 10-16 tokens, responses of 4-12, the tiny preset, router replay on). Megatron at 2 ranks splits the experts
over both (expert parallel 2). The torch backend runs at the apps' defaults (`backend.experts_kernel` and the
`train` section's micro-batch budget, read from their config classes), so the ratios are against what the apps
train with.

Run it in the environment of the backend to compare (each has the torch backend too): `bash
scripts/test_veomni.sh --build-only`, then `UV_PROJECT_ENVIRONMENT=.veomni-env uv run --no-sync python
benchmarks/backend_step_time.py`; or the same with `test_megatron.sh` and `.megatron-env`. It times the backends
installed there. Every configuration runs in fresh processes of its own, one after the other; the last line prints
each one's median step time as a ratio to the torch backend at one rank.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

import torch
from moe_models import MoEConfig, MoEForCausalLM, save_pretrained
from routing_state import RoutingSpec, RoutingTrace
from trainers import TrainBatch, TrainLoopConfig, TrainSample, collate, train_step
from trainers.algorithm import PPOConfig
from trainers.algorithm.build import build_algorithm
from trainers.backend import OptimConfig
from trainers.backend.config import TorchBackendConfig

VOCAB, PAD = 48, 0
CONFIGS = [("torch", 1), ("torch", 2), ("veomni", 1), ("veomni", 2), ("megatron", 1), ("megatron", 2)]


def make_model() -> MoEForCausalLM:
    torch.manual_seed(0)
    return MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=VOCAB, pad_token_id=PAD))


@torch.no_grad()
def make_batch(
    model: MoEForCausalLM,
    prompts: int,
    samples: int,
    response_lengths: list[int] | None = None,
    shared_prompts: bool = False,
) -> TrainBatch:
    """Random prompts and responses, routing and log-probs from the model's own forward (as an engine records them).
    Responses are 4-12 tokens unless `response_lengths` gives each sample's. `shared_prompts`: the `samples` of a
    group share their prompt (a GRPO batch); otherwise every sample has its own."""
    gen = torch.Generator().manual_seed(1)
    cfg = model.config
    spec = RoutingSpec(cfg.num_moe_layers, cfg.num_experts_per_tok, cfg.num_experts)
    out = []
    prompt = torch.zeros(1, 0, dtype=torch.int64)
    for i in range(prompts * samples):
        n_prompt = int(torch.randint(10, 17, (1,), generator=gen)) if i % samples == 0 or not shared_prompts else 0
        n_resp = int(torch.randint(4, 13, (1,), generator=gen)) if response_lengths is None else response_lengths[i]
        ids = torch.randint(1, VOCAB, (1, n_prompt + n_resp), generator=gen)  # a new prompt, then the response
        if n_prompt:
            prompt = ids[:, :n_prompt]
        ids = torch.cat([prompt, ids[:, n_prompt:]], dim=1)
        n_prompt = prompt.shape[1]
        routed = model(ids, capture_routing=True).routed_experts
        lp, _ = model.token_log_probs(ids, None)
        trace = RoutingTrace(spec)
        trace.extend(routed[0, :-1].numpy(), version=0)
        out.append(
            TrainSample(
                uid=f"s{i}",
                group_id=f"g{i // samples}",
                data_source="bench",
                prompt_ids=ids[0, :n_prompt].tolist(),
                response_ids=ids[0, n_prompt:].tolist(),
                loss_mask=[1] * n_resp,
                rollout_log_probs=lp[0, n_prompt - 1 :].tolist(),
                token_versions=[0] * n_resp,
                reward=float(int(torch.randint(0, 2, (1,), generator=gen))),
                routing=trace,
            )
        )
    return collate(out, PAD)


def _rank(
    kind: str, rank: int, world: int, port: int, ckpt: str, batch_path: str, steps: int, answers: mp.Queue
) -> None:
    os.environ.setdefault("VEOMNI_VERBOSITY", "ERROR")
    import torch.distributed as dist
    from moe_models import load_pretrained
    from trainers.backend import TorchBackend
    from trainers.backend.data_parallel import DataParallel

    torch.set_num_threads(1)
    if world > 1 or kind != "torch":
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dp = DataParallel(rank, world) if world > 1 else None
    optim = OptimConfig(lr=1e-5)
    if kind == "torch":
        kernel = TorchBackendConfig().experts_kernel  # the apps' default, not the constructor's
        backend = TorchBackend(load_pretrained(ckpt), optim, device="cpu", data_parallel=dp, experts_kernel=kernel)
    elif kind == "veomni":
        from trainers.backend.veomni.backend import VeOmniBackend

        backend = VeOmniBackend(ckpt, optim, data_parallel=dp)
    else:
        from trainers.backend.megatron.backend import MegatronBackend

        backend = MegatronBackend(ckpt, optim, data_parallel=dp, expert_parallel=world)
    batch = torch.load(batch_path, weights_only=False)
    algorithm = build_algorithm(PPOConfig(), max_new_tokens=12)
    loop = TrainLoopConfig(router_replay=True)
    times = []
    for i in range(steps + 2):  # two warm-up steps
        t0 = time.perf_counter()
        train_step(backend, algorithm, batch, loop)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        answers.put(statistics.median(times))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def time_config(kind: str, world: int, ckpt: str, batch_path: str, steps: int) -> float:
    ctx = mp.get_context("spawn")
    answers = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        ctx.Process(target=_rank, args=(kind, r, world, port, ckpt, batch_path, steps, answers)) for r in range(world)
    ]
    for p in procs:
        p.start()
    median = answers.get(timeout=1800)
    for p in procs:
        p.join(timeout=120)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"{kind} at {world} ranks: exit codes {[p.exitcode for p in procs]}")
    return float(median)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="timed steps per configuration (after 2 warm-up)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = make_model()
        save_pretrained(model, Path(tmp) / "ckpt")
        batch_path = str(Path(tmp) / "batch.pt")
        batch = make_batch(model, args.prompts, args.samples)
        torch.save(batch, batch_path)
        print(
            f"batch: {batch.batch_size} sequences, {int(batch.response_mask.sum())} loss tokens, "
            f"{int(batch.attention_mask.sum())} tokens; {args.steps} timed steps per configuration; torch backend: "
            f"experts_kernel {TorchBackendConfig().experts_kernel}, "
            f"micro_batch_tokens {TrainLoopConfig().micro_batch_tokens}"
        )
        medians = {}
        for kind, world in [(k, w) for k, w in CONFIGS if k == "torch" or find_spec(k) is not None]:
            medians[(kind, world)] = time_config(kind, world, str(Path(tmp) / "ckpt"), batch_path, args.steps)
            print(f"{kind:>6} x{world}: {medians[(kind, world)]:.3f} s/step")
    base = medians[("torch", 1)]
    print("step time vs torch x1: " + "  ".join(f"{k} x{w} {m / base:.2f}x" for (k, w), m in medians.items()))


if __name__ == "__main__":
    main()
