"""Qwen3-MoE-compatible causal LM in plain torch: router capture and replay, HF checkpoints, tokenizers
(a byte-level BPE chat tokenizer trained offline, and a character tokenizer)."""

from moe_models.bpe_training import train_chat_tokenizer
from moe_models.chat_tokenizer import ChatTokenizer
from moe_models.checkpoint import (
    load_pretrained,
    load_state_dict_numpy,
    load_state_dict_tensors,
    save_pretrained,
    state_dict_numpy,
)
from moe_models.config import MoEConfig
from moe_models.model import MoEForCausalLM
from moe_models.moe import EXPERTS_KERNELS, ExpertsKernel, set_experts_kernel
from moe_models.output import CausalLMOutput
from moe_models.replay import RouterReplay
from moe_models.tokenizer import CharTokenizer, build_char_tokenizer, load_tokenizer

__all__ = [
    "EXPERTS_KERNELS",
    "CausalLMOutput",
    "CharTokenizer",
    "ChatTokenizer",
    "ExpertsKernel",
    "MoEConfig",
    "MoEForCausalLM",
    "RouterReplay",
    "build_char_tokenizer",
    "load_pretrained",
    "load_state_dict_numpy",
    "load_state_dict_tensors",
    "load_tokenizer",
    "save_pretrained",
    "set_experts_kernel",
    "state_dict_numpy",
    "train_chat_tokenizer",
]
