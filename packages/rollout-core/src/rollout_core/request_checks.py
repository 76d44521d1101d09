"""Input checks every engine applies to a generate call, with one wording."""

from __future__ import annotations

from collections.abc import Sequence

from rollout_core.params import SamplingParams


def check_prompt(
    prompt_ids: Sequence[int],
    params: SamplingParams,
    *,
    vocab_size: int,
    max_context: int,
    context: str = "the context",
) -> None:
    """Raises ValueError for an empty prompt, ids outside `[0, vocab_size)`, or prompt + budget > `max_context`."""
    if not prompt_ids:
        raise ValueError("prompt_ids: expected at least one token, got an empty prompt")
    bad = [t for t in prompt_ids if not 0 <= int(t) < vocab_size]
    if bad:
        raise ValueError(f"prompt_ids: expected token ids in [0, {vocab_size}), got {bad[0]}")
    if len(prompt_ids) + params.max_new_tokens > max_context:
        raise ValueError(
            f"prompt ({len(prompt_ids)}) + max_new_tokens ({params.max_new_tokens}) exceeds {context} ({max_context})"
        )
