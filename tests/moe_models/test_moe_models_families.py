"""Every supported family against transformers' own class: a small random checkpoint that transformers itself writes
loads here with the same logits (fp32, 1e-5) and the same router top-k ids for every token; what we save loads in
transformers with the same logits; router replay of the recorded routing reproduces it exactly; and the batch-invariant
(true on-policy) forward gives each sequence the same bits alone or in a padded batch.

The checkpoints exercise each family's particulars: Qwen2-MoE's shared expert gate and qkv biases, Mixtral's
`block_sparse_moe` keys and sliding window, DeepSeek-V3's MLA (with and without a q low-rank path, interleaved and
half-split rotary, YaRN with mscale), group-limited sigmoid routing with a correction bias and dense first layers,
GPT-OSS's sinks, alternating sliding layers, biased router and clamped experts (weights perturbed so that biases,
sinks and the correction bias are not zero).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from moe_models import MoEForCausalLM, RouterReplay, load_pretrained, save_pretrained

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

TOL = 1e-5
VOCAB = 64

COMMON = {"vocab_size": VOCAB, "hidden_size": 64, "num_attention_heads": 4}


def _checkpoints() -> dict[str, Callable[[], torch.nn.Module]]:
    t = transformers
    mla = {"kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "n_routed_experts": 8}
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16}
    return {
        "qwen3_moe": lambda: t.Qwen3MoeForCausalLM(
            t.Qwen3MoeConfig(
                **COMMON,
                intermediate_size=96,
                moe_intermediate_size=32,
                num_hidden_layers=3,
                num_key_value_heads=2,
                head_dim=32,
                num_experts=8,
                num_experts_per_tok=2,
                mlp_only_layers=[1],
            )
        ),
        "qwen2_moe": lambda: t.Qwen2MoeForCausalLM(
            t.Qwen2MoeConfig(
                **COMMON,
                intermediate_size=96,
                moe_intermediate_size=32,
                num_hidden_layers=3,
                shared_expert_intermediate_size=48,
                num_key_value_heads=2,
                num_experts=8,
                num_experts_per_tok=2,
            )
        ),
        "mixtral": lambda: t.MixtralForCausalLM(
            t.MixtralConfig(
                **COMMON,
                intermediate_size=48,
                num_hidden_layers=2,
                num_key_value_heads=2,
                head_dim=32,
                num_local_experts=4,
                num_experts_per_tok=2,
                sliding_window=5,
            )
        ),
        "deepseek_v3": lambda: t.DeepseekV3ForCausalLM(
            t.DeepseekV3Config(
                **COMMON,
                **mla,
                intermediate_size=96,
                moe_intermediate_size=32,
                num_hidden_layers=3,
                num_key_value_heads=4,
                n_shared_experts=2,
                num_experts_per_tok=2,
                n_group=4,
                topk_group=2,
                first_k_dense_replace=1,
                q_lora_rank=32,
                v_head_dim=24,
                rope_parameters={**yarn, "mscale": 1.0, "mscale_all_dim": 0.8},
            )
        ),
        "deepseek_v3_plain_q": lambda: t.DeepseekV3ForCausalLM(
            t.DeepseekV3Config(
                **COMMON,
                **mla,
                intermediate_size=96,
                moe_intermediate_size=32,
                num_hidden_layers=2,
                num_key_value_heads=4,
                n_shared_experts=1,
                num_experts_per_tok=3,
                n_group=2,
                topk_group=1,
                first_k_dense_replace=0,
                q_lora_rank=None,
                v_head_dim=16,
                rope_interleave=False,
            )
        ),
        "gpt_oss": lambda: t.GptOssForCausalLM(
            t.GptOssConfig(
                **COMMON,
                intermediate_size=32,
                num_hidden_layers=2,
                num_key_value_heads=2,
                head_dim=32,
                num_local_experts=4,
                num_experts_per_tok=2,
                sliding_window=4,
            )
        ),
    }


CHECKPOINTS = _checkpoints()


def _transformers_model(name: str) -> torch.nn.Module:
    """transformers' model with every weight perturbed (biases, sinks and the correction bias leave zero)."""
    torch.manual_seed(sorted(CHECKPOINTS).index(name))
    model = CHECKPOINTS[name]().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        for buffer_name, b in model.named_buffers():
            if buffer_name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
    return model


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (3, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # right padding
    mask[2, 5:] = 0
    return ids, mask


def _router_top_k(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """transformers' chosen expert ids per MoE layer, from its router modules' outputs: [B, T, L_moe, K]."""
    picked: list[torch.Tensor] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: picked.append(out[2]))
        for m in model.modules()
        if type(m).__name__.endswith(("TopKRouter", "TopkRouter"))
    ]
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    for hook in hooks:
        hook.remove()
    return torch.stack([p.view(*ids.shape, -1) for p in picked], dim=2)


@pytest.fixture(scope="module", params=sorted(CHECKPOINTS))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object, object]:
    """(name, transformers' model, ours loaded from the checkpoint transformers wrote)."""
    theirs = _transformers_model(request.param)
    path = tmp_path_factory.mktemp(request.param)
    theirs.save_pretrained(str(path))
    return request.param, theirs, load_pretrained(path).eval()


def test_a_transformers_checkpoint_loads_with_its_logits_and_routing(pair: tuple[str, object, object]) -> None:
    name, theirs, ours = pair
    ids, mask = _inputs(1)
    real = mask.bool()
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).logits  # type: ignore[operator]
        out = ours(ids, mask, capture_routing=True)  # type: ignore[operator]
    assert (out.logits - expected)[real].abs().max().item() <= TOL, name
    their_ids = _router_top_k(theirs, ids, mask)  # type: ignore[arg-type]
    assert out.routed_experts is not None and out.routed_experts.shape == their_ids.shape
    assert torch.equal(out.routed_experts.sort(-1).values[real], their_ids.sort(-1).values[real]), name


def test_our_checkpoint_loads_in_transformers_with_the_same_logits(
    pair: tuple[str, object, object], tmp_path: Path
) -> None:
    name, theirs, ours = pair
    save_pretrained(ours, tmp_path)  # type: ignore[arg-type]
    written = set(transformers.AutoConfig.from_pretrained(str(tmp_path)).to_dict()) >= {"model_type"}
    reloaded = type(theirs).from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    ids, mask = _inputs(2)
    with torch.no_grad():
        expected = ours(ids, mask).logits  # type: ignore[operator]
        got = reloaded(input_ids=ids, attention_mask=mask).logits
    assert written
    assert (got - expected)[mask.bool()].abs().max().item() <= TOL, name


def test_replaying_the_recorded_routing_reproduces_it_exactly(pair: tuple[str, object, object]) -> None:
    _, _, ours = pair
    ids, mask = _inputs(3)
    with torch.no_grad():
        recorded = ours(ids, mask, capture_routing=True)  # type: ignore[operator]
        replay = RouterReplay(ids=recorded.routed_experts, mask=mask.bool())
        replayed = ours(ids, mask, replay=replay, capture_routing=True)  # type: ignore[operator]
    assert torch.equal(replayed.routed_experts, recorded.routed_experts)
    assert torch.equal(replayed.logits, recorded.logits)


def test_forced_routing_changes_the_logits_and_is_what_the_router_reports(pair: tuple[str, object, object]) -> None:
    _, _, ours = pair
    model: MoEForCausalLM = ours  # type: ignore[assignment]
    ids, mask = _inputs(4)
    cfg = model.config
    forced = torch.stack(
        [torch.randperm(cfg.num_experts)[: cfg.num_experts_per_tok] for _ in range(ids.numel() * cfg.num_moe_layers)]
    ).view(*ids.shape, cfg.num_moe_layers, cfg.num_experts_per_tok)
    with torch.no_grad():
        native = model(ids, mask).logits
        out = model(ids, mask, replay=RouterReplay(ids=forced, mask=mask.bool()), capture_routing=True)
    real = mask.bool()
    assert torch.equal(out.routed_experts[real], forced[real])
    assert not torch.allclose(out.logits[real], native[real])


def test_the_invariant_forward_gives_a_sequence_the_same_bits_alone_or_batched(
    pair: tuple[str, object, object],
) -> None:
    _, _, ours = pair
    model: MoEForCausalLM = ours  # type: ignore[assignment]
    ids, mask = _inputs(5)
    with torch.no_grad():
        batched = model(ids, mask, invariant=True, capture_routing=True)
        normal = model(ids, mask).logits
        for row in range(ids.shape[0]):
            n = int(mask[row].sum())
            alone = model(ids[row : row + 1, :n], invariant=True, capture_routing=True)
            assert torch.equal(alone.logits[0], batched.logits[row, :n])
            assert torch.equal(alone.routed_experts[0], batched.routed_experts[row, :n])
    assert (batched.logits - normal)[mask.bool()].abs().max().item() <= 1e-4


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3", "gpt_oss"])
def test_weights_load_back_from_every_layout_exactly(family: str) -> None:
    """Canonical names (what the trainer pushes to the engine), the disk layout and transformers' in-memory one."""
    from moe_models import MoEConfig, hf_state_dict, load_state_dict_tensors, state_dict_numpy

    torch.manual_seed(0)
    source = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=32, model_type=family))
    layouts = {
        "canonical": {k: torch.from_numpy(v) for k, v in state_dict_numpy(source).items()},
        "disk": {k: torch.from_numpy(v) for k, v in state_dict_numpy(source, disk_layout=True).items()},
        "transformers": hf_state_dict(source),
    }
    for name, state in layouts.items():
        torch.manual_seed(1)
        target = MoEForCausalLM(source.config)
        load_state_dict_tensors(target, state)
        for key, value in source.state_dict().items():
            assert torch.equal(target.state_dict()[key], value), (family, name, key)
