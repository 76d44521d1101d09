"""Data-parallel TorchBackend (FSDP2 over gloo, 2 CPU processes) gives the one-process metrics, every one of them
(loss, clip fractions, ratios, mismatch, grad norm), on every rank.

The test runs this same file as a script in two processes (`python thisfile.py rank world port out`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from routing_state import RoutingSpec, RoutingTrace
from trainers import TrainBatch, TrainLoopConfig, TrainSample, collate, train_step
from trainers.algorithm import PPOConfig
from trainers.algorithm.build import build_algorithm
from trainers.backend import OptimConfig, TorchBackend
from trainers.backend.data_parallel import DataParallel
from trainers_fixtures import PAD, VOCAB, tiny_model

STEPS = 2


@torch.no_grad()
def fixed_batch() -> TrainBatch:
    """8 sequences of varied length: routing captured by the model's own forward, rollout log-probs its own
    log-probs plus noise (so the PPO ratio is not 1 everywhere), rewards in groups of 4."""
    model = tiny_model()
    gen = torch.Generator().manual_seed(1)
    spec = RoutingSpec(model.config.num_moe_layers, model.config.num_experts_per_tok, model.config.num_experts)
    samples = []
    for i in range(8):
        n_prompt, n_resp = 3 + i % 3, 2 + (i * 5) % 7
        ids = torch.randint(1, VOCAB, (1, n_prompt + n_resp), generator=gen)
        out = model(ids, capture_routing=True)
        lp, _ = model.token_log_probs(ids, None)
        trace = RoutingTrace(spec)
        trace.extend(out.routed_experts[0, :-1].numpy(), version=0)
        noisy = (lp[0, n_prompt - 1 :] + 0.05 * torch.randn(n_resp, generator=gen)).tolist()
        samples.append(
            TrainSample(
                uid=f"s{i}",
                group_id=f"g{i // 4}",
                data_source="toy",
                prompt_ids=ids[0, :n_prompt].tolist(),
                response_ids=ids[0, n_prompt:].tolist(),
                loss_mask=[1] * n_resp,
                rollout_log_probs=noisy,
                token_versions=[0] * n_resp,
                reward=float(i % 3 == 0),
                routing=trace,
            )
        )
    return collate(samples, PAD)


def run_steps(data_parallel: DataParallel | None) -> list[dict[str, float]]:
    """Two train steps (2 mini-batches each, small micro-batches) on the fixed batch."""
    torch.set_num_threads(1)
    loop = TrainLoopConfig(mini_batches_per_step=2, micro_batch_tokens=20, mismatch_sample_seqs=2)
    backend = TorchBackend(tiny_model(), OptimConfig(lr=1e-2), device="cpu", data_parallel=data_parallel)
    algorithm = build_algorithm(PPOConfig(), max_new_tokens=8)
    batch = fixed_batch()
    out = []
    for _ in range(STEPS):
        m = train_step(backend, algorithm, batch, loop).metrics
        weights, _ = backend.export_weights()
        m["weights/sum_abs"] = float(sum(w.abs().sum() for w in weights.values()))
        out.append(m)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_process_fsdp2_matches_one_process_loss(tmp_path: Path) -> None:
    port = _free_port()
    procs = [
        subprocess.Popen([sys.executable, __file__, str(rank), "2", str(port), str(tmp_path / f"r{rank}.json")])
        for rank in range(2)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    single = run_steps(None)
    assert {"actor/pg_clipfrac", "actor/ratio_max", "actor/ppo_kl", "mismatch/replay/k3"} <= single[0].keys()
    for rank in range(2):
        dp = json.loads((tmp_path / f"r{rank}.json").read_text())
        for step in range(STEPS):
            assert dp[step].keys() == single[step].keys(), (rank, step)
            # every metric covers the whole batch on every rank, not its own rows alone. rel 1e-3: the gradient
            # all-reduce sums in another order than one process, and AdamW
            # (lr 1e-2) moves an element whose gradient is rounding noise by ~lr either way, so the later mini-batches'
            # metrics drift; on an AVX2 VM ppo_kl of step 1 was 2.0e-4 off (0.149476 vs 0.149506), the rest <= 9.2e-5
            for key, value in single[step].items():
                assert dp[step][key] == pytest.approx(value, rel=1e-3, abs=1e-6), (rank, step, key)
            assert dp[step]["actor/optimizer_steps"] == 2.0


def _worker(rank: int, world: int, port: int, out: Path) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out.write_text(json.dumps(run_steps(DataParallel.from_process_group())))
        dist.barrier()  # both ranks done before the group is torn down (gloo aborts on a one-sided teardown)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
