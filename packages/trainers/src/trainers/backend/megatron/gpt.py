"""Our Qwen3-MoE config as a Megatron-Core `GPTModel` (local layer spec: plain torch modules, no Transformer
Engine), its weights from our HF state dict, and its logits for a right-padded batch.

Supported (`support.check_qwen3`): every layer MoE (`mlp_only_layers` empty, `decoder_sparse_step` 1), untied
embeddings, top-k softmax routing with renormalised weights (Megatron's softmax after top-k on the logits is the same
function), default RoPE with a whole-number base; tensor parallel 1, expert parallel dividing the experts. Anything
else raises at build time.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.transformer_config import TransformerConfig
from moe_models import MoEConfig

from trainers.backend.megatron import compat
from trainers.backend.megatron.convert import Shape, hf_to_megatron
from trainers.backend.megatron.support import check_qwen3


def shape_of(cfg: MoEConfig, *, ep_size: int = 1, ep_rank: int = 0) -> Shape:
    return Shape(
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
        cfg.num_experts,
        ep_size,
        ep_rank,
    )


def transformer_config(cfg: MoEConfig) -> TransformerConfig:
    check_qwen3(cfg.to_hf_dict())
    tc = TransformerConfig(
        num_layers=cfg.num_hidden_layers,
        hidden_size=cfg.hidden_size,
        num_attention_heads=cfg.num_attention_heads,
        num_query_groups=cfg.num_key_value_heads,
        kv_channels=cfg.head_dim,
        ffn_hidden_size=cfg.intermediate_size,
        num_moe_experts=cfg.num_experts,
        moe_router_topk=cfg.num_experts_per_tok,
        moe_ffn_hidden_size=cfg.moe_intermediate_size,
        normalization="RMSNorm",
        layernorm_epsilon=cfg.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        qk_layernorm=True,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        moe_token_dispatcher_type="allgather",
        moe_router_load_balancing_type="none",
        moe_aux_loss_coeff=0.0,
        moe_router_score_function="softmax",
        moe_router_pre_softmax=False,
        persist_layer_norm=False,
        bias_activation_fusion=False,
        apply_rope_fusion=False,
        masked_softmax_fusion=False,
        gradient_accumulation_fusion=False,
    )
    compat.check_no_dropout(tc)
    return tc


def build_gpt(cfg: MoEConfig, hf_state: Mapping[str, torch.Tensor], *, ep_size: int = 1, ep_rank: int = 0) -> GPTModel:
    """The model with this expert-parallel rank's weights (Megatron's parallel state must be initialised with
    `expert_model_parallel_size=ep_size`)."""
    compat.install()
    tc = transformer_config(cfg)
    spec = get_gpt_layer_local_spec(
        num_experts=cfg.num_experts, moe_grouped_gemm=False, qk_layernorm=True, normalization="RMSNorm"
    )
    model = GPTModel(
        config=tc,
        transformer_layer_spec=spec,
        vocab_size=cfg.vocab_size,
        max_sequence_length=cfg.max_position_embeddings,
        position_embedding_type="rope",
        rotary_base=int(cfg.rope_theta),
        share_embeddings_and_output_weights=False,
    )
    weights = hf_to_megatron(hf_state, shape_of(cfg, ep_size=ep_size, ep_rank=ep_rank))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    if missing or unexpected:
        raise ValueError(f"megatron weights: missing {missing}, unexpected {unexpected}")
    return model


def causal_padding_mask(attention_mask: torch.Tensor | None, batch: int, seq: int) -> torch.Tensor:
    """Megatron's mask, [B, 1, T, T] bool, True = may not attend: later positions, and padding keys."""
    blocked = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)[None, None].expand(batch, 1, seq, seq)
    if attention_mask is not None:
        blocked = blocked | ~attention_mask.bool()[:, None, None, :]
        blocked = blocked & ~torch.eye(seq, dtype=torch.bool)  # a padding query still sees itself: no empty row
    return blocked


def gpt_logits(model: GPTModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """input_ids [B, T] int64, attention_mask [B, T] (1 = token, right padding) or None -> logits [B, T, V]."""
    b, t = input_ids.shape
    positions = torch.arange(t, device=input_ids.device)[None].expand(b, t)
    mask = causal_padding_mask(attention_mask, b, t).to(input_ids.device)
    return model(input_ids, positions, attention_mask=mask)
