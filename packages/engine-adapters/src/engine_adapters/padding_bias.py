"""The logit bias that keeps an SGLang server from sampling a checkpoint's padding rows: ids at or beyond the
tokenizer's size exist in the embedding (checkpoints pad their vocabulary, e.g. 151,936 rows for 151,669 ids) but are
no tokens. SGLang takes a per-request `logit_bias` (token id -> bias); a padding row keeps e^-100 of its weight, which
is nothing next to rows within ~80 logits of it (a real checkpoint's padding rows are nowhere near that far above).
vLLM servers run our worker extension, which masks those logits to -inf instead (`rl_sample_only`): exact."""

from __future__ import annotations

PADDING_BIAS = -100.0  # OpenAI's bound on a bias, which vLLM clamps to as well


def padding_bias(tokenizer_size: int | None, rows: int) -> dict[str, float]:
    """`{id: PADDING_BIAS}` for every id in `[tokenizer_size, rows)` (empty when the tokenizer covers every row);
    JSON keys are strings, as both servers parse them."""
    if tokenizer_size is None or tokenizer_size >= rows:
        return {}
    return {str(i): PADDING_BIAS for i in range(tokenizer_size, rows)}
