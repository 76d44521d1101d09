"""Megatron-Core's GPTModel, built from our weights, computes what our model computes: for the same batch, the
same log-probs (1e-5, fp32) and gradients, with and without router replay (one sample's rows only partly
recorded: the rest routes natively), at expert parallel 1 and 2 over gloo. Needs the `megatron` group, Python
>= 3.12: `bash scripts/test_megatron.sh`.

Each rank runs this file as a script (`python thisfile.py rank world port workdir`). At expert parallel 2 each
rank takes half the batch (data parallel for the dense weights, whose gradients are summed over the ranks; each
rank owns half the experts, whose gradients Megatron's all-gather dispatcher already sums over both halves).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM, RouterReplay, load_pretrained, save_pretrained
from moe_models.log_probs import next_token_log_probs

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
        subprocess.Popen([sys.executable, __file__, str(r), str(world), str(port), str(tmp_path)], env=env)
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


if __name__ == "__main__":
    rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
