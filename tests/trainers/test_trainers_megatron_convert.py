"""HF <-> Megatron-Core weight layout (plain torch, no Megatron needed): exact round trips at expert parallel 1
and 2, and the grouped QKV layout Megatron expects, checked head by head."""

from __future__ import annotations

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM
from trainers.backend.megatron.convert import Shape, hf_to_megatron, megatron_to_hf

CFG = MoEConfig.preset("tiny", vocab_size=24, num_attention_heads=4, num_key_value_heads=2)


def _hf() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {k: v.clone() for k, v in MoEForCausalLM(CFG).state_dict().items()}


def _shape(ep: int = 1, rank: int = 0) -> Shape:
    c = CFG
    return Shape(c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.num_experts, ep, rank)


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_hf_to_megatron_and_back_is_exact_at_every_expert_parallel_size(ep: int) -> None:
    hf = _hf()
    ranks = [hf_to_megatron(hf, _shape(ep, r)) for r in range(ep)]
    back = megatron_to_hf(ranks, _shape(ep))
    assert back.keys() == hf.keys()
    for name, tensor in hf.items():
        assert torch.equal(back[name], tensor), name


def test_each_expert_parallel_rank_holds_its_contiguous_block_of_experts() -> None:
    hf = _hf()
    gate_up = hf["model.layers.1.mlp.experts.gate_up_proj"]
    rank1 = hf_to_megatron(hf, _shape(2, 1))
    local = [k for k in rank1 if k.startswith("decoder.layers.1.mlp.experts.local_experts.")]
    assert len(local) == 2 * CFG.num_experts // 2
    first = CFG.num_experts // 2  # rank 1's first expert
    assert torch.equal(rank1["decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.weight"], gate_up[first])


def test_qkv_rows_follow_megatrons_query_group_layout() -> None:
    hf = _hf()
    qkv = hf_to_megatron(hf, _shape())["decoder.layers.0.self_attention.linear_qkv.weight"]
    d, per = CFG.head_dim, CFG.num_attention_heads // CFG.num_key_value_heads
    q, k, v = (hf[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv")
    rows = iter(qkv.split(d))
    for g in range(CFG.num_key_value_heads):
        for h in range(per):
            assert torch.equal(next(rows), q[(g * per + h) * d : (g * per + h + 1) * d])
        assert torch.equal(next(rows), k[g * d : (g + 1) * d])
        assert torch.equal(next(rows), v[g * d : (g + 1) * d])


def test_bad_expert_parallel_sizes_are_refused_with_what_was_expected() -> None:
    with pytest.raises(ValueError, match="ep_size dividing 8"):
        _shape(3)
    with pytest.raises(ValueError, match="expected 2 rank state dicts, got 1"):
        megatron_to_hf([hf_to_megatron(_hf(), _shape(2, 0))], _shape(2))
