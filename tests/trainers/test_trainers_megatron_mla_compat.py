"""Multi-latent attention on Megatron-Core 0.19.2 without Transformer Engine: compat workarounds 4 and 5 pinned both
ways (Megatron still needs them, and they work), and the bug verl #6005 is about, pinned absent.

verl #6005 ("update patch for MLA flashattn forward"): MLA's query/key head (nope + rope) is wider than its value
head, and flash attention on packed (THD) sequences needs them equal. verl patched `MultiLatentAttention.forward`
to pad V to the query width and trim the output back; #6005 applies that patch only below megatron-core 0.16.2,
since Megatron-LM #3003 put the same pad/trim in Megatron itself. Our build carries Megatron's own forward (no verl
patch) at 0.19.2, whose packed path pads V (and restores the core attention's value width afterwards, which verl's
patch left widened), while our unpacked path hands the narrower V to `MlaDotProductAttention` as it is. The
parity of the whole model with unequal widths is `test_trainers_megatron_mla_parity.py`'s.
Needs the `megatron` group: `bash scripts/test_megatron.sh`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

import pytest
import torch

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(
        find_spec("megatron") is None, reason="no Megatron-Core here: run bash scripts/test_megatron.sh"
    ),
]

CFG: dict[str, Any] = {
    "vocab_size": 40,
    "hidden_size": 32,
    "intermediate_size": 48,
    "moe_intermediate_size": 16,
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 16,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4,
    "v_head_dim": 6,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "max_position_embeddings": 64,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}
QK, V, HEADS = 12, 6, 4  # query/key head width (nope + rope), value head width


@pytest.fixture(scope="module")
def one_rank() -> Iterator[None]:
    """Megatron's parallel state on a one-process gloo group (the attention modules ask it for their groups)."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from trainers.backend.megatron import compat

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, expert_model_parallel_size=1)
    compat.install()
    yield
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


def _attention(cfg: dict[str, Any]) -> Any:
    """The first layer's attention as the DeepSeek-V3 build makes it."""
    from megatron.core.transformer.spec_utils import build_module
    from trainers.backend.megatron.deepseek_gpt import block_spec, mla_transformer_config

    tc = mla_transformer_config(cfg)
    return build_module(block_spec(tc).layer_specs[0].submodules.self_attention, config=tc, layer_number=1)


def _softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, blocked: torch.Tensor | None):
    """q, k [s, b, h, QK], v [s, b, h, V], blocked [b, 1, s, s] (True = masked) -> [s, b, h, V]."""
    scores = torch.einsum("sbhd,tbhd->bhst", q, k) * scale
    if blocked is not None:
        scores = scores.masked_fill(blocked, float("-inf"))
    return torch.einsum("bhst,tbhd->sbhd", scores.softmax(-1), v)


def test_local_attention_refuses_mlas_head_widths_and_mla_dot_product_attention_takes_them(one_rank: None) -> None:
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from trainers.backend.megatron.compat import MlaDotProductAttention
    from trainers.backend.megatron.deepseek_gpt import mla_transformer_config

    tc = mla_transformer_config(CFG)
    args = {"config": tc, "layer_number": 1, "attn_mask_type": AttnMaskType.causal, "attention_type": "self"}
    widths = {"softmax_scale": 0.3, "k_channels": QK, "v_channels": V}
    with pytest.raises(TypeError, match="unexpected keyword argument 'k_channels'"):
        DotProductAttention(**args, **widths)  # Megatron-LM issue #1589
    attention = MlaDotProductAttention(**args, **widths)
    torch.manual_seed(0)
    s, b = 5, 2
    q, k, v = torch.randn(s, b, HEADS, QK), torch.randn(s, b, HEADS, QK), torch.randn(s, b, HEADS, V)
    blocked = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)[None, None].expand(b, 1, s, s)
    got = attention(q, k, v, blocked)
    want = _softmax_attention(q, k, v, 0.3, blocked).reshape(s, b, HEADS * V)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="expected MLA's softmax_scale, k_channels, v_channels"):
        MlaDotProductAttention(**args, softmax_scale=0.3, k_channels=QK)


def test_megatron_wants_a_fused_query_projection_without_a_query_latent_and_ours_builds_a_plain_one(
    one_rank: None,
) -> None:
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.multi_latent_attention import MLASelfAttention
    from trainers.backend.megatron.deepseek_gpt import block_spec, mla_transformer_config

    tc = mla_transformer_config({**CFG, "q_lora_rank": None})
    spec = block_spec(tc).layer_specs[0].submodules.self_attention
    with pytest.raises(RuntimeError, match="qk_layernorm requires TransformerEngine"):
        MLASelfAttention(tc, spec.submodules, layer_number=1, attn_mask_type=AttnMaskType.causal)
    plain = _attention({**CFG, "q_lora_rank": None})
    assert type(plain.linear_q_proj) is ColumnParallelLinear and not hasattr(plain, "q_layernorm")
    assert not isinstance(plain.kv_layernorm, IdentityOp)  # the kv latent is still normalised
    latent = _attention(CFG)  # with a query latent Megatron's own resolver decides
    assert type(latent.linear_q_up_proj) is ColumnParallelLinear and not isinstance(latent.q_layernorm, IdentityOp)


class FlashLikeAttention(torch.nn.Module):
    """Stands in for flash attention: on packed sequences it refuses a value head narrower than the query head,
    and records the value and the value width it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden_size_per_attention_head_v = V
        self.seen: list[tuple[torch.Tensor, int]] = []

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Any, **kw: Any):
        packed = kw.get("packed_seq_params") is not None
        if packed and value.shape[-1] != query.shape[-1]:
            raise RuntimeError(f"flash attention, packed: head widths differ, q {query.shape[-1]}, v {value.shape[-1]}")
        self.seen.append((value.clone(), self.hidden_size_per_attention_head_v))
        if packed:  # [t, h, d] -> [t, h * d_v]
            out = _softmax_attention(query[:, None], key[:, None], value[:, None], 0.5, None)
            return out[:, 0].reshape(query.shape[0], -1)
        return _softmax_attention(query, key, value, 0.5, None).flatten(2)


def test_packed_mla_pads_v_to_the_query_width_as_verl_6005_relies_on_and_unpacked_mla_keeps_it(one_rank: None) -> None:
    import megatron.core
    from megatron.core.packed_seq_params import PackedSeqParams
    from megatron.core.transformer.multi_latent_attention import MultiLatentAttention
    from packaging.version import Version

    assert Version(megatron.core.__version__) >= Version("0.16.2")  # has Megatron-LM #3003 (verl #6005's bound)
    assert MultiLatentAttention.forward.__module__ == "megatron.core.transformer.multi_latent_attention"  # unpatched
    attention = _attention(CFG)
    attention.core_attention = FlashLikeAttention()
    torch.manual_seed(0)
    t = 6
    q, k, v = torch.randn(t, HEADS, QK), torch.randn(t, HEADS, QK), torch.randn(t, HEADS, V)
    cu = torch.tensor([0, t], dtype=torch.int32)
    packed = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=t, max_seqlen_kv=t)
    out = attention._run_core_attention(q, k, v, None, packed_seq_params=packed)
    ((padded, width_inside),) = attention.core_attention.seen
    assert padded.shape[-1] == QK and width_inside == QK and torch.equal(padded[..., :V], v)
    assert not padded[..., V:].any()  # zeros: they add nothing to the output, which is trimmed back
    assert attention.core_attention.hidden_size_per_attention_head_v == V  # restored after the call
    want = _softmax_attention(q[:, None], k[:, None], v[:, None], 0.5, None)[:, 0]
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)

    attention.core_attention.seen.clear()
    s, b = 5, 2
    q, k, v = torch.randn(s, b, HEADS, QK), torch.randn(s, b, HEADS, QK), torch.randn(s, b, HEADS, V)
    attention._run_core_attention(q, k, v, None)
    ((handed, _),) = attention.core_attention.seen
    assert torch.equal(handed, v)  # unpacked (our path): V as it is, MlaDotProductAttention takes unequal widths
