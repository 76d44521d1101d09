"""Builds a checkpoint as a user brings one: written by transformers' own `Qwen3MoeForCausalLM` (random weights)
with a 151,936-row embedding, beside a 151,669-id Qwen-layout tokenizer (`moe_models.full_vocab`) whose chat eos is
`<|im_end|>`, while config.json's eos is `<|endoftext|>` and generation_config.json lists both, as Qwen's checkpoints
do. Nothing is downloaded. Needs transformers (the workspace's dev group).

    uv run python scripts/make_hf_checkpoint.py DIR [--hidden 64 --layers 2 --experts 8]
        [--tokenizer-layout ours|transformers] [--texts FILE.jsonl] [--eos-probability 0.2]

`--tokenizer-layout transformers` saves the tokenizer with transformers' `save_pretrained` (the chat template in
`chat_template.jinja`, no special_tokens_map.json); `--texts` learns the tokenizer's first merges from a JSONL
file's prompts and answers (verl's row format) instead of a few built-in sentences.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

SENTENCES = (
    "sort: 31415 = 11345",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May? The answer is 72.",
)


def _texts(path: Path | None) -> list[str]:
    if path is None:
        return list(SENTENCES) * 3
    out: list[str] = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        prompt = row["prompt"] if isinstance(row["prompt"], str) else " ".join(m["content"] for m in row["prompt"])
        answer = row.get("reward_model", {}).get("ground_truth", row.get("ground_truth", ""))
        out += [prompt, str(answer)]
    return out


def make_checkpoint(
    directory: Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    experts: int = 8,
    tokenizer_layout: str = "ours",
    texts: list[str] | None = None,
    seed: int = 0,
    eos_probability: float = 0.0,
) -> Path:
    """The checkpoint folder: config.json, generation_config.json, model.safetensors and the tokenizer files.
    `eos_probability` > 0: the random model ends a turn (`<|im_end|>`) with about that probability at each token,
    so responses stop before the budget (the embeddings' dimension 0 is raised to a constant that the residual
    stream keeps, and `<|im_end|>`'s head row reads it)."""
    import torch
    import transformers
    from moe_models.full_vocab import FULL_VOCAB_ROWS, build_full_vocab_tokenizer

    tokenizer = build_full_vocab_tokenizer(texts or list(SENTENCES) * 3)
    vocab = tokenizer.vocab()
    end_of_text, im_end = vocab["<|endoftext|>"], vocab["<|im_end|>"]
    config = transformers.Qwen3MoeConfig(
        vocab_size=FULL_VOCAB_ROWS,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        moe_intermediate_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=experts,
        num_experts_per_tok=2,
        max_position_embeddings=4096,
        bos_token_id=end_of_text,
        eos_token_id=end_of_text,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen3MoeForCausalLM(config)
    if eos_probability > 0:
        _end_turns(model, im_end, eos_probability, tokenizer.vocab_size)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=end_of_text, eos_token_id=[im_end, end_of_text], pad_token_id=end_of_text
    )
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(directory))
    if tokenizer_layout == "ours":
        tokenizer.save(directory)
    elif tokenizer_layout == "transformers":
        with tempfile.TemporaryDirectory() as tmp:
            tokenizer.save(tmp)
            transformers.AutoTokenizer.from_pretrained(tmp).save_pretrained(str(directory))
    else:
        raise ValueError(f"tokenizer_layout: expected ours or transformers, got {tokenizer_layout!r}")
    return directory


def _end_turns(model: object, im_end: int, probability: float, tokens: int) -> None:
    """`<|im_end|>` gets logit log(p / (1 - p) * tokens) against ~0 for every other token (see `make_checkpoint`)."""
    import math

    import torch

    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] += 8.0  # type: ignore[attr-defined]
        normed = 8.0 / math.sqrt(64.0 / model.config.hidden_size)  # type: ignore[attr-defined]  # dim 0 after the norm
        head = model.lm_head.weight  # type: ignore[attr-defined]
        head[im_end] = 0.0
        head[im_end, 0] = math.log(probability / (1 - probability) * tokens) / normed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--tokenizer-layout", choices=("ours", "transformers"), default="ours")
    parser.add_argument("--texts", type=Path, default=None, help="a JSONL file whose prompts and answers train merges")
    parser.add_argument(
        "--eos-probability", type=float, default=0.0, help="make the random model end a turn with ~this probability"
    )
    args = parser.parse_args()
    path = make_checkpoint(
        args.directory,
        hidden=args.hidden,
        layers=args.layers,
        experts=args.experts,
        tokenizer_layout=args.tokenizer_layout,
        texts=_texts(args.texts),
        eos_probability=args.eos_probability,
    )
    print(f"wrote {path}: {sorted(p.name for p in path.iterdir())}")


if __name__ == "__main__":
    main()
