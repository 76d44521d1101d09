"""Each CUDA assumption `trainers.backend.veomni.compat` works around, pinned both ways: the test fails when VeOmni
no longer needs the workaround (drop it) and when the workaround no longer works. Needs the `veomni` group.

The checks run in a child process (`python thisfile.py check port checkpoint`): VeOmni's parallel state is a
process-wide singleton that must not leak into other tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from moe_models import save_pretrained
from trainers_fixtures import tiny_model

pytestmark = [
    pytest.mark.veomni,
    pytest.mark.skipif(find_spec("veomni") is None, reason="no VeOmni here: run bash scripts/test_veomni.sh"),
]


def _run(check: str, tmp_path: Path) -> dict[str, object]:
    ckpt = tmp_path / "ckpt"
    if not ckpt.exists():
        save_pretrained(tiny_model(), ckpt)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"VEOMNI_VERBOSITY": "ERROR"}
    out = subprocess.run(
        [sys.executable, __file__, check, str(port), str(ckpt)], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the workaround is for machines without CUDA")
def test_veomni_cannot_pick_a_process_group_backend_without_cuda_so_we_create_the_group(tmp_path: Path) -> None:
    got = _run("comm_backend", tmp_path)
    assert got["veomni_raises"], "get_dist_comm_backend() works without CUDA now: workaround 1 can go"
    assert got["ours_builds"]


def test_veomni_default_ops_do_not_run_on_cpu_and_eager_ops_do(tmp_path: Path) -> None:
    got = _run("ops", tmp_path)
    assert got["default_fails"], "VeOmni's default ops now run on this CPU: workaround 2 can go"
    assert got["eager_logits_max_diff"] < 1e-5  # and the eager model is ours to float rounding


def test_veomni_refuses_to_parallelize_a_cpu_model_at_one_rank_so_we_skip_it(tmp_path: Path) -> None:
    got = _run("one_rank", tmp_path)
    assert got["veomni_raises"], "build_parallelize_model now takes a CPU model at one rank: workaround 3 can go"
    assert got["ours_trains"]


# ---------------------------------------------------------------------- the child process
def _group(port: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def _logits_diff(model: torch.nn.Module) -> float:
    ids = torch.randint(1, 24, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = model(input_ids=ids, use_cache=False).logits
        want = tiny_model()(ids).logits
    return float((got - want).abs().max())


def _check(name: str, port: int, ckpt: str) -> dict[str, object]:
    from trainers.backend.veomni import compat

    if name == "comm_backend":
        from veomni.utils.device import get_dist_comm_backend

        try:
            get_dist_comm_backend()
            raises = False
        except RuntimeError:
            raises = True
        _group(port)
        compat.init_parallel(1, "cpu")
        return {"veomni_raises": raises, "ours_builds": compat.build_model(ckpt, 1) is not None}
    _group(port)
    compat.init_parallel(1, "cpu")
    if name == "ops":
        from veomni.arguments.arguments_types import OpsImplementationConfig
        from veomni.models import build_foundation_model

        try:
            model = build_foundation_model(
                ckpt, ckpt, torch_dtype="float32", init_device="cpu", ops_implementation=OpsImplementationConfig()
            )
            _logits_diff(model)
            fails = False
        except Exception:
            fails = True
        return {"default_fails": fails, "eager_logits_max_diff": _logits_diff(compat.build_model(ckpt, 1))}
    if name == "one_rank":
        from veomni.distributed.torch_parallelize import MixedPrecisionConfig, build_parallelize_model

        model = compat.build_model(ckpt, 1)
        try:
            build_parallelize_model(
                model,
                weights_path=ckpt,
                init_device="cpu",
                mixed_precision=MixedPrecisionConfig(enable=False),
                enable_gradient_checkpointing=False,
            )
            raises = False
        except ValueError:
            raises = True
        loss = model(input_ids=torch.tensor([[1, 2, 3, 4]]), use_cache=False).logits.float().logsumexp(-1).mean()
        loss.backward()
        trains = all(p.grad is not None for p in model.parameters())
        return {"veomni_raises": raises, "ours_trains": trains}
    raise ValueError(f"unknown check {name!r}")


if __name__ == "__main__":
    print(json.dumps(_check(sys.argv[1], int(sys.argv[2]), sys.argv[3])))
