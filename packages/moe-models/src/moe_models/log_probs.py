"""Next-token log-probs from a causal LM's whole logits, for backends whose model returns logits (VeOmni's,
Megatron's): the formula `moe_models.head_log_probs` computes chunk by chunk from the hidden states for ours."""

from __future__ import annotations

import torch


def next_token_log_probs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    at_ids: torch.Tensor | None,
    *,
    temperature: float = 1.0,
    vocab_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits `[B, T, V]` (any float dtype; computed in float32), input_ids `[B, T]` int64 -> (`[B, T-1]` with
    `out[:, t] = log_softmax(logits[:, t] / temperature)[input_ids[:, t + 1]]`, and `[B, T-1, K]` log-probs of
    `at_ids` `[B, T-1, K]` int64 at the same rows, or None without `at_ids`). `vocab_size`: only the first that many
    columns are scored (the tokenizer's ids of a padded head; None: all)."""
    if not temperature > 0:
        raise ValueError(f"temperature: got {temperature}, expected > 0 (greedy has no log-probs)")
    shifted = logits[:, :-1, :vocab_size].float()
    if temperature != 1.0:
        shifted = shifted / temperature
    norm = torch.logsumexp(shifted, dim=-1, keepdim=True)  # [B, T-1, 1]
    picked = shifted.gather(-1, input_ids[:, 1:, None]) - norm
    at = None
    if at_ids is not None:
        if tuple(at_ids.shape[:2]) != tuple(picked.shape[:2]):
            raise ValueError(
                f"at_ids: expected shape [B, T-1, K] = {tuple(picked.shape[:2])} + [K], got {tuple(at_ids.shape)}"
            )
        at = shifted.gather(-1, at_ids) - norm
    return picked.squeeze(-1), at


@torch.no_grad()
def next_token_entropy(
    logits: torch.Tensor, *, temperature: float = 1.0, vocab_size: int | None = None
) -> torch.Tensor:
    """logits `[B, T, V]` -> `[B, T-1]` float32 entropies (nats, no gradient) of `softmax(logits[:, t] /
    temperature)` over the first `vocab_size` columns (None: all): the distribution `next_token_log_probs` scores."""
    if not temperature > 0:
        raise ValueError(f"temperature: got {temperature}, expected > 0 (greedy has no entropy)")
    shifted = logits[:, :-1, :vocab_size].float()
    if temperature != 1.0:
        shifted = shifted / temperature
    log_p = torch.log_softmax(shifted, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)
