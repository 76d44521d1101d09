"""DeepSeek-V3 (transformers' `DeepseekV3ForCausalLM`, from its `config.json` dict) as a Megatron-Core `GPTModel`:
multi-latent attention from the local layer spec, dense MLPs in the first `first_k_dense_replace` layers, and MoE
layers with a sigmoid router whose `e_score_correction_bias` (Megatron's `expert_bias`) only selects experts,
group-limited top-k, renormalised top-k weights times `routed_scaling_factor`, and shared experts. Weights come from
the HF in-memory state dict (`deepseek_convert`); logits for a right-padded batch from `gpt.gpt_logits`.

What transformers computes and what Megatron-Core 0.19.2 computes agree only on part of the config space;
`mla_transformer_config` refuses the rest (the checks and their reasons are `support.check_deepseek`'s, which a run
applies to a checkpoint's config.json before building anything). The multi-token-prediction layers
(`num_nextn_predict_layers`) are not part of transformers' forward and are not built.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from megatron.core.transformer.transformer_config import MLATransformerConfig

from trainers.backend.megatron import compat
from trainers.backend.megatron.deepseek_convert import MlaShape, hf_to_megatron
from trainers.backend.megatron.support import HFConfig, check_deepseek, rope_settings, routing_settings


def mla_transformer_config(cfg: HFConfig) -> MLATransformerConfig:
    """The Megatron config of a DeepSeek-V3 `config.json` dict (fp32, no dropout, no fusions). Fields whose
    transformers default is not what an absent key would suggest (`q_lora_rank`, `n_group`, `topk_group`,
    `norm_topk_prob`, `routed_scaling_factor`, `n_shared_experts`) must be present, as transformers writes them."""
    check_deepseek(cfg)
    layers, dense = cfg["num_hidden_layers"], cfg["first_k_dense_replace"]
    tc = MLATransformerConfig(
        num_layers=layers,
        hidden_size=cfg["hidden_size"],
        num_attention_heads=cfg["num_attention_heads"],
        ffn_hidden_size=cfg["intermediate_size"],
        q_lora_rank=cfg["q_lora_rank"],
        kv_lora_rank=cfg["kv_lora_rank"],
        qk_head_dim=cfg["qk_nope_head_dim"],
        qk_pos_emb_head_dim=cfg["qk_rope_head_dim"],
        v_head_dim=cfg["v_head_dim"],
        **rope_settings(cfg),
        moe_ffn_hidden_size=cfg["moe_intermediate_size"],
        moe_shared_expert_intermediate_size=cfg["n_shared_experts"] * cfg["moe_intermediate_size"],
        moe_layer_freq=[0] * dense + [1] * (layers - dense),
        **routing_settings(cfg),
        normalization="RMSNorm",
        layernorm_epsilon=cfg.get("rms_norm_eps", 1e-6),
        qk_layernorm=True,  # under MLA: the q and kv latent norms
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        transformer_impl="local",
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        persist_layer_norm=False,
        bias_activation_fusion=False,
        apply_rope_fusion=False,
        masked_softmax_fusion=False,
        gradient_accumulation_fusion=False,
    )
    compat.check_no_dropout(tc)
    return tc


def block_spec(tc: MLATransformerConfig) -> TransformerBlockSubmodules:
    """Megatron's local layer specs, dense for the first layers (`tc.moe_layer_freq`), multi-latent attention
    through compat workarounds 4 and 5."""
    block = get_gpt_decoder_block_spec(tc, use_transformer_engine=False, normalization="RMSNorm")
    for spec in block.layer_specs:
        attention = spec.submodules.self_attention
        attention.module = compat.LocalMLASelfAttention
        attention.submodules.core_attention = compat.MlaDotProductAttention
        if tc.q_lora_rank is None:  # no query latent, so no query norm (Megatron refuses one)
            attention.submodules.q_layernorm = IdentityOp
    return block


def build_deepseek_gpt(
    cfg: HFConfig, hf_state: Mapping[str, torch.Tensor], *, ep_size: int = 1, ep_rank: int = 0
) -> GPTModel:
    """The model with this expert-parallel rank's weights (Megatron's parallel state must be initialised with
    `expert_model_parallel_size=ep_size`). `hf_state`: `DeepseekV3ForCausalLM.state_dict()` names and layout,
    including each MoE layer's `e_score_correction_bias`."""
    compat.install()
    tc = mla_transformer_config(cfg)
    model = GPTModel(
        config=tc,
        transformer_layer_spec=block_spec(tc),
        vocab_size=cfg["vocab_size"],
        max_sequence_length=cfg["max_position_embeddings"],
        position_embedding_type="rope",  # under MLA the attention layers hold their own (rope or yarn) embedding
        share_embeddings_and_output_weights=False,
    )
    weights = hf_to_megatron(hf_state, MlaShape.from_hf_config(cfg, ep_size=ep_size, ep_rank=ep_rank))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    if missing or unexpected:
        raise ValueError(f"megatron DeepSeek-V3 weights: missing {missing}, unexpected {unexpected}")
    return model
