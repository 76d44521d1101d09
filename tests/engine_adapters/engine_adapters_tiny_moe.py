"""A tiny random Qwen3-MoE checkpoint in HF format, made locally (nothing is downloaded).

Used by the vLLM tests as the served model and as the reference: `transformers`' `Qwen3MoeForCausalLM` with
the same weights gives the router top-k and log-probs the server must match.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig, Qwen3MoeForCausalLM

VOCAB_SIZE = 512
NUM_LAYERS = 2
NUM_EXPERTS = 8
TOP_K = 2
EOS_ID = 1


def tiny_config() -> Qwen3MoeConfig:
    return Qwen3MoeConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # vLLM's CPU attention refuses head sizes below 32
        num_experts=NUM_EXPERTS,
        num_experts_per_tok=TOP_K,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=EOS_ID,
        pad_token_id=2,
        torch_dtype="float32",
    )


def tiny_model(seed: int) -> Qwen3MoeForCausalLM:
    """Random weights; router weights scaled up so that routing differs between seeds and tokens."""
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(tiny_config()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.mul_(20.0)
            elif name.endswith("lm_head.weight"):
                p.mul_(10.0)  # peakier next-token distributions than N(0, 0.02) gives
                p[EOS_ID] = 0.0  # EOS logit 0: rare, so long generations rarely stop early
    return model


def save_tokenizer(folder: Path) -> None:
    vocab = {"<bos>": 0, "<eos>": 1, "<pad>": 2, "<unk>": 3}
    vocab.update({f"t{i}": i for i in range(4, VOCAB_SIZE)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    fast.save_pretrained(folder)


def save_checkpoint(folder: Path, seed: int) -> Path:
    """Writes config, safetensors weights (per-expert HF names) and tokenizer into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    model = tiny_model(seed)
    model.save_pretrained(folder, safe_serialization=True)
    save_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": EOS_ID, "bos_token_id": 0}))
    return folder


def load_reference(folder: Path) -> Qwen3MoeForCausalLM:
    return Qwen3MoeForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
