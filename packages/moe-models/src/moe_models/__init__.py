"""MoE causal LMs of the Qwen3-MoE, Qwen2-MoE, Mixtral, DeepSeek-V3 and GPT-OSS families in plain torch: one decoder
definition, router capture and replay, each family's Hugging Face checkpoints, tokenizers (a byte-level BPE chat
tokenizer trained offline, and a character tokenizer)."""

import moe_models.families  # noqa: F401  (each family registers itself with moe_models.config)
from moe_models.bpe_training import train_chat_tokenizer
from moe_models.chat_tokenizer import ChatTokenizer
from moe_models.checkpoint import (
    hf_state_dict,
    load_config,
    load_pretrained,
    load_state_dict_numpy,
    load_state_dict_tensors,
    save_pretrained,
    save_weights,
    state_dict_numpy,
)
from moe_models.config import FAMILY_NAMES, MoEConfig
from moe_models.model import MoEForCausalLM
from moe_models.moe import EXPERTS_KERNELS, ExpertsKernel, set_experts_kernel
from moe_models.output import CausalLMOutput, TokenScores
from moe_models.replay import RouterReplay
from moe_models.tokenizer import CharTokenizer, build_char_tokenizer, checkpoint_stop_ids, load_tokenizer

__all__ = [
    "EXPERTS_KERNELS",
    "FAMILY_NAMES",
    "CausalLMOutput",
    "CharTokenizer",
    "ChatTokenizer",
    "ExpertsKernel",
    "MoEConfig",
    "MoEForCausalLM",
    "RouterReplay",
    "TokenScores",
    "build_char_tokenizer",
    "checkpoint_stop_ids",
    "hf_state_dict",
    "load_config",
    "load_pretrained",
    "load_state_dict_numpy",
    "load_state_dict_tensors",
    "load_tokenizer",
    "save_pretrained",
    "save_weights",
    "set_experts_kernel",
    "state_dict_numpy",
    "train_chat_tokenizer",
]
