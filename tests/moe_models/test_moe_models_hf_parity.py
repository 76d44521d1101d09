"""Our model and transformers' Qwen3MoeForCausalLM load each other's checkpoints with the same logits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM, load_pretrained, save_pretrained

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

TOL = 1e-5
VOCAB = 61

CONFIGS = {
    "dense_layer_norm_topk": MoEConfig.preset(
        "tiny", vocab_size=VOCAB, num_hidden_layers=3, mlp_only_layers=(1,), norm_topk_prob=True
    ),
    "sparse_step_no_norm_tied": MoEConfig.preset(
        "tiny",
        vocab_size=VOCAB,
        num_hidden_layers=4,
        decoder_sparse_step=2,
        norm_topk_prob=False,
        tie_word_embeddings=True,
        num_experts_per_tok=3,
    ),
}


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (3, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # right padding
    mask[2, 4:] = 0
    return ids, mask


def _hf_model(path: Path) -> torch.nn.Module:
    model = transformers.Qwen3MoeForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return model.eval()


def _real(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return x[mask.bool()]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_our_checkpoint_loads_in_transformers_with_same_logits(name: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    ours = MoEForCausalLM(CONFIGS[name]).eval()
    save_pretrained(ours, tmp_path)
    theirs = _hf_model(tmp_path)
    ids, mask = _inputs(1)
    with torch.no_grad():
        expected = ours(ids, mask).logits
        got = theirs(input_ids=ids, attention_mask=mask).logits
    assert got.shape == expected.shape
    assert (_real(got, mask) - _real(expected, mask)).abs().max().item() <= TOL
    assert not expected[~mask.bool()].any()  # padding cells are not computed: zeros


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_checkpoint_loads_here_with_same_logits(name: str, tmp_path: Path) -> None:
    hf_config = transformers.Qwen3MoeConfig(**CONFIGS[name].to_hf_dict())
    torch.manual_seed(1)
    theirs = transformers.Qwen3MoeForCausalLM(hf_config).eval()
    theirs.save_pretrained(str(tmp_path))
    ours = load_pretrained(tmp_path).eval()
    assert ours.config == CONFIGS[name]
    ids, mask = _inputs(2)
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).logits
        got = ours(ids, mask).logits
    assert (_real(got, mask) - _real(expected, mask)).abs().max().item() <= TOL


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_captured_routing_equals_transformers_router_top_k(name: str, tmp_path: Path) -> None:
    config = CONFIGS[name]
    torch.manual_seed(3)
    ours = MoEForCausalLM(config).eval()
    save_pretrained(ours, tmp_path)
    theirs = _hf_model(tmp_path)
    ids, mask = _inputs(4)
    with torch.no_grad():
        routed = ours(ids, mask, capture_routing=True).routed_experts
        hf_router_logits = theirs(input_ids=ids, attention_mask=mask, output_router_logits=True).router_logits
    assert routed is not None
    assert routed.shape == (3, 11, config.num_moe_layers, config.num_experts_per_tok)
    assert len(hf_router_logits) == config.num_moe_layers
    for ordinal, layer_logits in enumerate(hf_router_logits):
        probs = torch.softmax(layer_logits.float(), dim=-1)
        hf_top = torch.topk(probs, config.num_experts_per_tok, dim=-1).indices.view(3, 11, -1)
        assert torch.equal(_real(routed[:, :, ordinal], mask), _real(hf_top, mask))
    assert not routed[~mask.bool()].any()  # padding cells route nowhere: zeros


def test_state_dict_names_match_transformers_in_memory_names() -> None:
    config = CONFIGS["dense_layer_norm_topk"]
    theirs = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**config.to_hf_dict()))
    ours = MoEForCausalLM(config)
    their_shapes = {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    our_shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert our_shapes == their_shapes
