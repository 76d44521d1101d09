"""MLA parity: Megatron-Core's GPTModel built as DeepSeek-V3 (multi-latent attention, dense first layers, sigmoid
router with a selection-only expert bias, group-limited top-k, shared experts) computes what transformers'
`DeepseekV3ForCausalLM` computes, from checkpoints transformers itself wrote (fp32): the same logits (1e-5), the
same top-k experts for every token of every MoE layer, the same log-probs under replayed routing, and the same
gradients (1e-5 of each tensor's largest entry), at expert parallel 1 and 2 over gloo. Two configs: a query latent
with yarn RoPE in transformers' interleaved layout, and a plain query projection with default RoPE, not
interleaved. Needs the `megatron` group, Python >= 3.12: `bash scripts/test_megatron.sh`.

Each rank runs this file as a script (`python thisfile.py rank world port workdir`); at expert parallel 2 each rank
takes half the batch and owns half the experts (the dense weights' gradients are summed over the ranks here).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(
        find_spec("megatron") is None, reason="no Megatron-Core here: run bash scripts/test_megatron.sh"
    ),
]

COMMON: dict[str, Any] = {
    "vocab_size": 40,
    "hidden_size": 32,
    "intermediate_size": 48,
    "moe_intermediate_size": 16,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4,
    "v_head_dim": 6,  # != qk_nope + qk_rope: the value head is narrower than the query/key head
    "n_routed_experts": 8,
    "routed_scaling_factor": 2.5,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "latent_query_yarn": {
        **COMMON,
        "num_hidden_layers": 3,
        "first_k_dense_replace": 1,
        "q_lora_rank": 16,
        "rope_interleave": True,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "beta_fast": 32,
            "beta_slow": 1,
        },
        "n_group": 4,
        "topk_group": 2,
        "num_experts_per_tok": 4,
        "n_shared_experts": 1,
    },
    "plain_query_rope": {
        **COMMON,
        "num_hidden_layers": 3,
        "first_k_dense_replace": 2,
        "q_lora_rank": None,
        "rope_interleave": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "n_group": 2,
        "topk_group": 1,
        "num_experts_per_tok": 2,
        "n_shared_experts": 2,
    },
}
B, T = 4, 12
TOL = 1e-5
GRAD_TOL = 1e-5  # max |difference| / max |gradient| per tensor


def hf_model(path: Path) -> Any:
    from transformers import DeepseekV3ForCausalLM

    return DeepseekV3ForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)


def write_checkpoint(cfg: dict[str, Any], path: Path, seed: int) -> None:
    """A random DeepSeek-V3 saved by transformers, with routers spread enough (and biases large enough) that
    tokens go to different experts and the bias and the group limit both change some choices."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**cfg)).float()
    with torch.no_grad():
        for layer in model.model.layers[cfg["first_k_dense_replace"] :]:
            layer.mlp.gate.weight.normal_(0.0, 0.5)
            layer.mlp.gate.e_score_correction_bias.uniform_(-0.1, 0.1)
    model.save_pretrained(path)


def moe_gates(model: Any) -> list[Any]:
    """transformers' routers, one per MoE layer, in layer order."""
    return [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "gate")]


def hf_forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, replay: tuple[torch.Tensor, torch.Tensor] | None):
    """(logits [B, T, V], each MoE layer's top-k ids [B, T, K]) from transformers' forward; `replay` = (ids
    [B, T, L_moe, K], rows [B, T] bool): those rows take the given ids, weights re-gathered from the sigmoid scores,
    renormalised and scaled as transformers' router does."""
    picked: list[torch.Tensor] = []
    gates = moe_gates(model)
    originals = [g.forward for g in gates]

    def routed(col: int, gate: Any, native: Any) -> Any:
        def forward(hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            logits, weights, top = native(hidden)
            if replay is not None:
                top = torch.where(replay[1].reshape(-1, 1), replay[0][:, :, col].reshape(top.shape), top)
                scores = logits.sigmoid().gather(1, top)
                weights = scores / (scores.sum(-1, keepdim=True) + 1e-20) * gate.routed_scaling_factor
            picked.append(top.reshape(ids.shape[0], ids.shape[1], -1))
            return logits, weights, top

        return forward

    for col, gate in enumerate(gates):
        gate.forward = routed(col, gate, gate.forward)
    try:
        logits = model(ids, attention_mask=mask).logits
    finally:
        for gate, original in zip(gates, originals, strict=True):
            gate.forward = original
    return logits, picked


def make_inputs(work: Path) -> None:
    """Per config: the policy's and another model's checkpoint, and the other model's routing of the batch (the
    replay rows); one batch of ids with two right-padded rows, replay rows and loss weights."""
    torch.manual_seed(2)
    ids = torch.randint(1, COMMON["vocab_size"], (B, T))
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 9:], mask[3, 7:] = 0, 0
    ids[mask == 0] = 0
    rows = mask.bool()
    rows[2, 4:] = False  # recorded for its first 4 positions only: the rest routes natively
    batch: dict[str, Any] = {"ids": ids, "mask": mask, "rows": rows, "weights": torch.rand(B, T - 1) * mask[:, 1:]}
    for name, cfg in CONFIGS.items():
        write_checkpoint(cfg, work / name, seed=0)
        write_checkpoint(cfg, work / f"{name}-other", seed=1)
        with torch.no_grad():
            _, picked = hf_forward(hf_model(work / f"{name}-other"), ids, mask, None)
        batch[f"routed-{name}"] = torch.stack(picked, dim=2)  # [B, T, L_moe, K]
    torch.save(batch, work / "batch.pt")


def hf_reference(work: Path, name: str, replay: bool) -> dict[str, Any]:
    """transformers' logits, log-probs, MoE top-k ids and parameter gradients of the weighted log-prob sum."""
    from moe_models.log_probs import next_token_log_probs

    b = torch.load(work / "batch.pt")
    model = hf_model(work / name)
    logits, picked = hf_forward(model, b["ids"], b["mask"], (b[f"routed-{name}"], b["rows"]) if replay else None)
    lp, _ = next_token_log_probs(logits, b["ids"], None)
    (lp * b["weights"]).sum().backward()
    grads = {k: p.grad for k, p in model.named_parameters()}
    return {"logits": logits.detach(), "lp": lp.detach(), "picked": picked, "grads": grads}


def megatron_forward_backward(cfg: dict, hf_state: dict, b: dict, part: slice, routed: torch.Tensor | None) -> dict:
    """One rank's DeepSeek-V3 GPTModel on its share of the batch: logits, log-probs, gradients of the weighted
    log-prob sum (dense ones summed over the ranks), each MoE layer's routing map [b, T, E], the replay hooks'
    layer numbers. `routed`: this share's replay ids [b, T, L_moe, K], or None to route natively."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.transformer.moe.router import TopKRouter
    from moe_models import RouterReplay
    from moe_models.log_probs import next_token_log_probs
    from trainers.backend.megatron.deepseek_gpt import build_deepseek_gpt
    from trainers.backend.megatron.gpt import gpt_logits
    from trainers.backend.megatron.replay import install_row_replay, replaying

    world, rank = parallel_state.get_expert_model_parallel_world_size(), parallel_state.get_expert_model_parallel_rank()
    model = build_deepseek_gpt(cfg, hf_state, ep_size=world, ep_rank=rank)
    replays = install_row_replay(model)
    maps: list[torch.Tensor] = []
    for router in (m for m in model.modules() if isinstance(m, TopKRouter)):
        router.register_forward_hook(lambda _m, _i, o: maps.append(o[1].detach()))
    ids, mask = b["ids"][part], b["mask"][part]
    with replaying(replays, None if routed is None else RouterReplay(routed, b["rows"][part])):
        logits = gpt_logits(model, ids, mask)
    lp, _ = next_token_log_probs(logits, ids, None)
    (lp * b["weights"][part]).sum().backward()
    grads = {}
    for key, p in model.named_parameters():
        g = p.grad.clone()
        if ".local_experts." not in key:
            dist.all_reduce(g)  # dense weights: data parallel over the ranks' halves
        grads[key] = g
    every_layer = torch.zeros(*ids.shape, cfg["num_hidden_layers"], cfg["num_experts_per_tok"], dtype=torch.long)
    try:  # rows with a column per layer (dense ones included) instead of one per MoE layer
        with replaying(replays, RouterReplay(every_layer, b["rows"][part])):
            refusal = "none"
    except ValueError as e:
        refusal = str(e)
    return {
        "logits": logits.detach(),
        "lp": lp.detach(),
        "grads": grads,
        "maps": [m.reshape(ids.shape[1], ids.shape[0], -1).transpose(0, 1) for m in maps],
        "replay_layers": [r.layer_number for r in replays],
        "refusal": refusal,
    }


def rank_main(rank: int, world: int, port: int, work: Path) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, expert_model_parallel_size=world)
    b = torch.load(work / "batch.pt")
    part = slice(rank * B // world, (rank + 1) * B // world)
    out: dict[str, Any] = {}
    for name in CONFIGS:
        cfg = json.loads((work / name / "config.json").read_text())
        hf_state = hf_model(work / name).state_dict()
        for replay in (False, True):
            routed = b[f"routed-{name}"][part] if replay else None
            out[f"{name}-{int(replay)}"] = megatron_forward_backward(cfg, hf_state, b, part, routed)
    torch.save(out, work / f"rank{rank}.pt")
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=[1, 2], ids=["ep1", "ep2"])
def megatron_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """{"work", "world", "ranks": each rank's outputs}: the ranks run once per expert-parallel size."""
    world = request.param
    work = tmp_path_factory.mktemp(f"mla-ep{world}")
    make_inputs(work)
    port = _free_port()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen([sys.executable, __file__, str(r), str(world), str(port), str(work)], env=env)
        for r in range(world)
    ]
    assert [p.wait(timeout=600) for p in procs] == [0] * world
    yield {"work": work, "world": world, "ranks": [torch.load(work / f"rank{r}.pt") for r in range(world)]}


def _joined(run: dict, key: str, field: str) -> torch.Tensor:
    return torch.cat([r[key][field] for r in run["ranks"]])


def _real(work: Path) -> torch.Tensor:
    return torch.load(work / "batch.pt")["mask"].bool()


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("replay", [False, True], ids=["native", "replayed"])
def test_mla_parity_logits_and_log_probs_match_transformers(megatron_run: dict, name: str, replay: bool) -> None:
    work, real = megatron_run["work"], _real(megatron_run["work"])
    want = hf_reference(work, name, replay)
    logits = _joined(megatron_run, f"{name}-{int(replay)}", "logits")
    assert (logits - want["logits"])[real].abs().max().item() <= TOL
    lp = _joined(megatron_run, f"{name}-{int(replay)}", "lp")
    assert (lp - want["lp"])[real[:, 1:]].abs().max().item() <= TOL
    if replay:  # the replayed rows come from another model: they do move the log-probs
        assert (want["lp"] - hf_reference(work, name, False)["lp"])[real[:, 1:]].abs().max().item() > 1e-3


@pytest.mark.parametrize("name", list(CONFIGS))
def test_mla_parity_router_picks_transformers_experts_for_every_token(megatron_run: dict, name: str) -> None:
    work, real, cfg = megatron_run["work"], _real(megatron_run["work"]), CONFIGS[name]
    want = hf_reference(work, name, False)["picked"]
    got = [torch.cat(layer) for layer in zip(*(r[f"{name}-0"]["maps"] for r in megatron_run["ranks"]), strict=True)]
    assert len(got) == len(want) == cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]
    for layer, (mg_map, hf_ids) in enumerate(zip(got, want, strict=True)):
        hf_map = torch.zeros_like(mg_map).scatter(-1, hf_ids, True)
        assert torch.equal(mg_map[real], hf_map[real]), layer
        assert len(hf_ids[real].unique()) > cfg["num_experts_per_tok"]  # tokens do not all go to the same experts


@pytest.mark.parametrize("name", list(CONFIGS))
def test_mla_parity_routing_depends_on_the_expert_bias_and_the_group_limit(megatron_run: dict, name: str) -> None:
    """What the parity above pins is not vacuous: transformers' own router picks other experts for some tokens
    without the bias, and for others without the group limit."""
    work, real = megatron_run["work"], _real(megatron_run["work"])
    b = torch.load(work / "batch.pt")
    model = hf_model(work / name)
    with torch.no_grad():
        want = torch.stack(hf_forward(model, b["ids"], b["mask"], None)[1], dim=2)
        for gate in moe_gates(model):
            gate.num_group = gate.topk_group = 1
        ungrouped = torch.stack(hf_forward(model, b["ids"], b["mask"], None)[1], dim=2)
        model = hf_model(work / name)
        for gate in moe_gates(model):
            gate.e_score_correction_bias.zero_()
        unbiased = torch.stack(hf_forward(model, b["ids"], b["mask"], None)[1], dim=2)
    for other in (ungrouped, unbiased):
        assert (want.sort(-1).values != other.sort(-1).values).any(-1)[real].any()


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("replay", [False, True], ids=["native", "replayed"])
def test_mla_parity_gradients_match_transformers(megatron_run: dict, name: str, replay: bool) -> None:
    from trainers.backend.megatron.deepseek_convert import MlaShape, megatron_to_hf

    want = hf_reference(megatron_run["work"], name, replay)["grads"]
    cfg = json.loads((megatron_run["work"] / name / "config.json").read_text())
    shape = MlaShape.from_hf_config(cfg, ep_size=megatron_run["world"])
    grads = megatron_to_hf([r[f"{name}-{int(replay)}"]["grads"] for r in megatron_run["ranks"]], shape, buffers=False)
    assert grads.keys() == want.keys()
    for key, g in want.items():  # to rounding, relative to each tensor's largest entry
        worst = (grads[key] - g).abs().max().item() / max(g.abs().max().item(), 1e-12)
        assert worst <= GRAD_TOL, (key, worst)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_mla_parity_replay_rows_have_one_column_per_moe_layer_in_layer_order(megatron_run: dict, name: str) -> None:
    cfg = CONFIGS[name]
    moe = list(range(cfg["first_k_dense_replace"], cfg["num_hidden_layers"]))
    for r in megatron_run["ranks"]:
        assert r[f"{name}-1"]["replay_layers"] == [i + 1 for i in moe]  # Megatron numbers layers from 1
        want = f"router replay: expected rows for {len(moe)} MoE layers, got {cfg['num_hidden_layers']}"
        assert r[f"{name}-1"]["refusal"] == want


if __name__ == "__main__":
    rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
