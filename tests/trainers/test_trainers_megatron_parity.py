"""Megatron-Core's GPTModel, built from our weights, computes what our model computes: for the same batch, the
same log-probs (1e-5, fp32) and gradients, with and without router replay (one sample's rows only partly
recorded: the rest routes natively), at expert parallel 1 and 2 over gloo. For DeepSeek-V3 (multi-latent
attention) the comparison is backend to backend: `MegatronBackend` against `TorchBackend` (whose model is ours),
with router replay, through their own log-prob, forward-backward and gradient-reduction calls. Needs the `megatron`
group, Python >= 3.12: `bash scripts/test_megatron.sh`.

Each rank runs this file as a script (`python thisfile.py mode rank world port workdir`). At expert parallel 2 each
rank takes half the batch (data parallel for the dense weights, whose gradients are summed over the ranks; each
rank owns half the experts, whose gradients Megatron's all-gather dispatcher already sums over both halves).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM, RouterReplay, load_pretrained, save_pretrained
from moe_models.log_probs import next_token_log_probs
from trainers import collate
from trainers.algorithm.loss_io import LossOutputs

sys.path.insert(0, str(Path(__file__).resolve().parent))  # trainers_fixtures, when a rank runs this file
from trainers_fixtures import PAD, rollouts, tiny_model

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(
        find_spec("megatron") is None, reason="no Megatron-Core here: run bash scripts/test_megatron.sh"
    ),
]

CFG = MoEConfig.preset("tiny", vocab_size=24, pad_token_id=0)
B, T = 4, 12
TOL = 1e-5
GRAD_TOL = 1e-5  # max |difference| / max |gradient| per tensor


def make_inputs(work: Path) -> None:
    """The policy's checkpoint and a batch: ids, right padding, replay rows of another model, loss weights."""
    torch.manual_seed(0)
    save_pretrained(MoEForCausalLM(CFG), work / "policy")
    torch.manual_seed(1)
    other = MoEForCausalLM(CFG)
    ids = torch.randint(1, CFG.vocab_size, (B, T))
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 9:], mask[3, 7:] = 0, 0
    ids[mask == 0] = 0
    with torch.no_grad():
        routed = other(ids, mask, capture_routing=True).routed_experts  # [B, T, L, K]
    rows = mask.bool()  # padding is not computed, so it records no routing
    rows[2, 4:] = False  # recorded for its first 4 positions only
    weights = torch.rand(B, T - 1) * mask[:, 1:]
    torch.save({"ids": ids, "mask": mask, "routed": routed, "rows": rows, "weights": weights}, work / "batch.pt")


def reference(work: Path, replay: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    b = torch.load(work / "batch.pt")
    model = load_pretrained(work / "policy")
    rr = RouterReplay(b["routed"], b["rows"]) if replay else None
    lp, _ = model.token_log_probs(b["ids"], b["mask"], replay=rr)
    (lp * b["weights"]).sum().backward()
    return lp.detach(), {k: p.grad for k, p in model.named_parameters()}


def rank_main(rank: int, world: int, port: int, work: Path) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state
    from trainers.backend.megatron.gpt import build_gpt, gpt_logits
    from trainers.backend.megatron.replay import install_row_replay, replaying

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, expert_model_parallel_size=world)
    b = torch.load(work / "batch.pt")
    part = slice(rank * B // world, (rank + 1) * B // world)
    hf = load_pretrained(work / "policy").state_dict()
    out: dict[str, object] = {}
    for replay in (False, True):
        model = build_gpt(CFG, hf, ep_size=world, ep_rank=rank)
        replays = install_row_replay(model)
        rows = RouterReplay(b["routed"][part], b["rows"][part]) if replay else None
        with replaying(replays, rows):
            logits = gpt_logits(model, b["ids"][part], b["mask"][part])
        lp, _ = next_token_log_probs(logits, b["ids"][part], None)
        (lp * b["weights"][part]).sum().backward()
        grads = {}
        for name, p in model.named_parameters():
            g = p.grad.clone()
            if ".local_experts." not in name:
                dist.all_reduce(g)  # dense weights: data parallel over the ranks' halves
            grads[name] = g
        out[f"lp{int(replay)}"], out[f"grads{int(replay)}"] = lp.detach(), grads
    torch.save(out, work / f"rank{rank}.pt")
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [1, 2])
def test_megatron_gpt_gives_our_log_probs_and_gradients_with_and_without_replay(tmp_path: Path, world: int) -> None:
    from trainers.backend.megatron.convert import megatron_to_hf
    from trainers.backend.megatron.gpt import shape_of

    make_inputs(tmp_path)
    port = _free_port()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen([sys.executable, __file__, "gpt", str(r), str(world), str(port), str(tmp_path)], env=env)
        for r in range(world)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0] * world
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    moved = 0.0
    for replay in (False, True):
        lp_ref, grads_ref = reference(tmp_path, replay)
        lp = torch.cat([r[f"lp{int(replay)}"] for r in ranks])
        real = torch.load(tmp_path / "batch.pt")["mask"][:, 1:].bool()
        assert (lp - lp_ref)[real].abs().max().item() <= TOL
        grads = megatron_to_hf([r[f"grads{int(replay)}"] for r in ranks], shape_of(CFG, ep_size=world))
        assert grads.keys() == grads_ref.keys()
        for name, g in grads_ref.items():  # to rounding, relative to each tensor's largest entry
            worst = (grads[name] - g).abs().max().item() / max(g.abs().max().item(), 1e-12)
            assert worst <= GRAD_TOL, (name, worst)
        moved = max(moved, (lp_ref - reference(tmp_path, not replay)[0])[real].abs().max().item())
    assert moved > 1e-3  # replay changes the log-probs of this batch: the comparison is not vacuous


# ---------------------------------------------------------------------------- DeepSeek-V3: backend to backend
MLA_BIG_CLIP = 1e9  # the clip never scales: optimizer_step leaves each backend's reduced, unclipped gradient


def _loss(weights: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor | None], LossOutputs]:
    return lambda lp, _top: LossOutputs((lp * weights.to(lp.device)).sum())


def _weights(micro: object) -> torch.Tensor:
    """Loss weights [b, t-1]: every response token, weighted by position (a weighted log-prob sum). The torch
    backend computes logits from the first response token on only, as the algorithms read them."""
    mask = micro.response_mask.float()  # type: ignore[attr-defined]
    return mask * (1.0 + 0.1 * torch.arange(mask.shape[1]))


def mla_backend_main(rank: int, world: int, port: int, work: Path) -> None:
    """One rank's MegatronBackend on rows rank::world of the batch: log-probs with and without replay, and the
    reduced gradient of one forward-backward with replay (our names, all-gathered), with its norm."""
    import torch.distributed as dist
    from trainers.backend import OptimConfig
    from trainers.backend.data_parallel import DataParallel
    from trainers.backend.megatron.backend import MegatronBackend

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    samples = torch.load(work / "samples.pt", weights_only=False)
    micro = collate(samples[rank::world], PAD)
    backend = MegatronBackend(
        str(work / "policy"),
        OptimConfig(grad_clip=MLA_BIG_CLIP),
        data_parallel=DataParallel(rank, world),
        expert_parallel=world,
    )
    out: dict[str, object] = {f"lp{int(r)}": backend.log_probs([micro], replay=r)[0] for r in (False, True)}
    backend.zero_grad()
    backend.forward_backward(micro, _loss(_weights(micro)), replay=True)
    out["norm"] = backend.optimizer_step()
    out["grads"] = backend.checkpoint.to_ours({n: p.grad for n, p in backend.model.named_parameters()})
    torch.save(out, work / f"rank{rank}.pt")
    dist.destroy_process_group()


def _torch_backend(work: Path, samples: list) -> dict[str, object]:
    from trainers.backend import OptimConfig, TorchBackend

    batch = collate(samples, PAD)
    backend = TorchBackend(load_pretrained(work / "policy"), OptimConfig(grad_clip=MLA_BIG_CLIP))
    out: dict[str, object] = {f"lp{int(r)}": backend.log_probs([batch], replay=r)[0] for r in (False, True)}
    backend.zero_grad()
    backend.forward_backward(batch, _loss(_weights(batch)), replay=True)
    out["norm"] = backend.optimizer_step()
    out["grads"] = {n: p.grad for n, p in backend.model.named_parameters()}
    out["real"] = batch.response_mask.bool()
    return out


@pytest.mark.parametrize("world", [1, 2], ids=["ep1", "ep2"])
def test_mla_parity_with_the_torch_backend_log_probs_and_gradients_under_router_replay(
    tmp_path: Path, world: int
) -> None:
    save_pretrained(tiny_model(model_type="deepseek_v3"), tmp_path / "policy")
    samples = rollouts(tiny_model(seed=1, model_type="deepseek_v3"), num_prompts=4, per_prompt=2)
    torch.save(samples, tmp_path / "samples.pt")
    port = _free_port()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    args = [str(world), str(port), str(tmp_path)]
    procs = [subprocess.Popen([sys.executable, __file__, "mla", str(r), *args], env=env) for r in range(world)]
    assert [p.wait(timeout=600) for p in procs] == [0] * world
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    want = _torch_backend(tmp_path, samples)
    worst = 0.0
    for replay in (0, 1):  # rank r holds samples r::world (collated to its own length): compare response tokens
        for r, got in enumerate(ranks):
            lp, ref, real = got[f"lp{replay}"], want[f"lp{replay}"][r::world], want["real"][r::world]
            t = lp.shape[1]
            assert not real[:, t:].any()  # no response token beyond the rank's own length
            worst = max(worst, (lp - ref[:, :t])[real[:, :t]].abs().max().item())
    assert worst <= TOL
    moved = (want["lp1"] - want["lp0"])[want["real"]].abs().max().item()
    assert moved > 1e-3  # replay changes the log-probs of this batch: the comparison is not vacuous
    grads = ranks[0]["grads"]
    assert grads.keys() == want["grads"].keys()
    grad_worst = 0.0
    for name, g in want["grads"].items():  # to rounding, relative to each tensor's largest entry
        grad_worst = max(grad_worst, (grads[name] - g).abs().max().item() / max(g.abs().max().item(), 1e-12))
    assert grad_worst <= GRAD_TOL
    assert float(ranks[0]["norm"]) == pytest.approx(float(want["norm"]), rel=1e-5)


if __name__ == "__main__":
    main = {"gpt": rank_main, "mla": mla_backend_main}[sys.argv[1]]
    main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
