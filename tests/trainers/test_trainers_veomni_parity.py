"""The VeOmni backend computes what the torch backend computes: for the same weights and batch, the same log-probs
(1e-5, fp32), loss and gradients, with and without router replay, at 1 rank (VeOmni unsharded) and at 2 ranks
(VeOmni's FSDP2 over gloo), and at 1 rank on a GPU (marker `gpu`). Needs the `veomni` group:
`bash scripts/test_veomni.sh`.

Each rank runs this file as a script (`python thisfile.py rank world port checkpoint device out`) and saves its results.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from moe_models import save_pretrained
from routing_state import RoutingTrace
from trainers import TrainBatch, TrainLoopConfig, collate, pad_to_multiple, train_step
from trainers.algorithm import PPOConfig
from trainers.algorithm.build import build_algorithm
from trainers.backend import OptimConfig, TorchBackend
from trainers_fixtures import MAX_NEW, PAD, rollouts, tiny_model

pytestmark = [
    pytest.mark.veomni,
    pytest.mark.skipif(find_spec("veomni") is None, reason="no VeOmni here: run bash scripts/test_veomni.sh"),
]

OPTIM = OptimConfig(lr=1e-2, grad_clip=1e9)  # no clipping: the gradients compared are the raw ones
LOOP = dict(mini_batches_per_step=1, micro_batch_tokens=40, mismatch_sample_seqs=2)
TOL = dict(rel=1e-5, abs=1e-5)


def parity_batch() -> TrainBatch:
    """Rollouts of another model (seed 1), so their routing rows differ from the policy's own routing (replay
    changes the log-probs), one sample's rows cut to its first 2 (the rest route natively), and two padding
    samples."""
    samples = rollouts(tiny_model(seed=1), num_prompts=3, per_prompt=2, seed=3)
    full = samples[2].routing
    assert full is not None
    cut = RoutingTrace(full.spec)
    cut.extend(full.to_numpy()[:2], version=0)
    samples[2] = dataclasses.replace(samples[2], routing=cut)
    return collate(pad_to_multiple(samples, 8, pad_token_id=PAD), PAD)


def results(backend: object) -> dict[str, object]:
    """Log-probs with and without replay, then one PPO step with replay: its loss and the full gradients."""
    batch = parity_batch()
    out: dict[str, object] = {
        f"lp_{replay}": backend.log_probs([batch], replay=replay)[0]
        for replay in (False, True)  # type: ignore[attr-defined]
    }
    m = train_step(
        backend,
        build_algorithm(PPOConfig(), max_new_tokens=MAX_NEW),
        batch,  # type: ignore[arg-type]
        TrainLoopConfig(router_replay=True, **LOOP),
    ).metrics
    out["pg_loss"], out["grad_norm"] = m["actor/pg_loss"], m["actor/grad_norm"]
    out["mismatch"] = {k: v for k, v in m.items() if k.startswith(("mismatch/", "actor/"))}
    model = backend.model  # type: ignore[attr-defined]
    out["grads"] = {
        n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().clone()
        for n, p in model.named_parameters()
    }
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(world: int, tmp_path: Path, device: str = "cpu") -> list[dict[str, object]]:
    ckpt = tmp_path / "ckpt"
    save_pretrained(tiny_model(), ckpt)
    port = _free_port()
    env = os.environ | {"VEOMNI_VERBOSITY": "WARNING"}
    args = [str(world), str(port), str(ckpt), device]
    procs = [
        subprocess.Popen([sys.executable, __file__, str(r), *args, str(tmp_path / f"r{r}.pt")], env=env)
        for r in range(world)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0] * world
    return [torch.load(tmp_path / f"r{r}.pt", map_location="cpu") for r in range(world)]


def _compare(world: int, tmp_path: Path, device: str) -> None:
    torch.set_num_threads(1)
    want = _to_cpu(results(TorchBackend(tiny_model(), OPTIM, device=device)))
    valid = parity_batch().response_mask.bool()
    assert not torch.allclose(want["lp_False"][valid], want["lp_True"][valid])  # replay matters on this batch
    for got in _run_ranks(world, tmp_path, device):
        for key in ("lp_False", "lp_True"):
            torch.testing.assert_close(got[key][valid], want[key][valid], rtol=1e-5, atol=1e-5)
        assert got["pg_loss"] == pytest.approx(want["pg_loss"], **TOL)
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], **TOL)
        assert got["mismatch"].keys() == want["mismatch"].keys()
        for key, value in want["mismatch"].items():
            assert got["mismatch"][key] == pytest.approx(value, rel=1e-4, abs=1e-7), key
        assert got["grads"].keys() == want["grads"].keys()
        for name, grad in want["grads"].items():
            torch.testing.assert_close(got["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def _to_cpu(out: dict[str, object]) -> dict[str, object]:
    moved = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in out.items()}
    moved["grads"] = {n: g.cpu() for n, g in out["grads"].items()}  # type: ignore[attr-defined]
    return moved


@pytest.mark.parametrize("world", [1, 2])
def test_veomni_backend_matches_the_torch_backend(world: int, tmp_path: Path) -> None:
    _compare(world, tmp_path, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check_veomni.sh)")
def test_veomni_backend_on_cuda_matches_the_torch_backend_on_cuda(tmp_path: Path) -> None:
    _compare(1, tmp_path, "cuda")


def _worker(rank: int, world: int, port: int, ckpt: str, device: str, out: Path) -> None:
    import torch.distributed as dist
    from trainers.backend.data_parallel import DataParallel
    from trainers.backend.veomni.backend import VeOmniBackend

    torch.set_num_threads(1)
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        dp = DataParallel.from_process_group() if world > 1 else None
        torch.save(_to_cpu(results(VeOmniBackend(ckpt, OPTIM, data_parallel=dp, device=device))), out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], Path(sys.argv[6]))
