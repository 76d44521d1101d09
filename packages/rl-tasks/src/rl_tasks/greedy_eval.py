"""Greedy accuracy of a causal LM on task examples, with the plain uncached forward (no engine).

Prompts are encoded as `[bos] + encode(prompt)`; the model must emit the answer then EOS. Prompts are
batched by length, so no batch holds padding and every row uses the same positions as at training time.
torch is imported lazily (the package's other modules stay torch-free).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rl_tasks.example import TaskExample
from rl_tasks.reward import RewardFn, RewardStats, score_safely

if TYPE_CHECKING:
    import torch


class TaskTokenizer(Protocol):
    """What the evaluator and the warm-up need from a tokenizer (moe_models' char tokenizer has it)."""

    bos_id: int
    eos_id: int
    pad_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class GreedyEvalResult:
    """`accuracy` is the mean `acc` over responses whose reward scored ok; `num_errors` counts the rest."""

    num_examples: int
    num_errors: int
    accuracy: float
    accuracy_by_source: dict[str, float]
    mean_response_tokens: float
    wall_s: float


def encode_prompt(tokenizer: TaskTokenizer, prompt: str) -> list[int]:
    return [tokenizer.bos_id, *tokenizer.encode(prompt)]


def _greedy_batch(
    model: torch.nn.Module, prompt_ids: torch.Tensor, max_new_tokens: int, eos_id: int
) -> list[list[int]]:
    """prompt_ids: [B, P] (no padding). Returns each row's generated ids, EOS excluded."""
    import torch

    ids = prompt_ids
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = model(ids, torch.ones_like(ids)).logits[:, -1, :]  # [B, V]
        nxt = logits.argmax(dim=-1)  # [B]
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if bool(done.all()):
            break
    out = []
    for row in ids[:, prompt_ids.shape[1] :].tolist():
        out.append(row[: row.index(eos_id)] if eos_id in row else row)
    return out


def greedy_decode(
    model: torch.nn.Module,
    tokenizer: TaskTokenizer,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    batch_size: int = 256,
) -> list[list[int]]:
    """Greedy response ids (EOS excluded) for each prompt, in input order."""
    import torch

    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError(
            f"greedy_decode: expected max_new_tokens >= 1 and batch_size >= 1, got {max_new_tokens}, {batch_size}"
        )
    by_len: dict[int, list[int]] = defaultdict(list)
    encoded = [encode_prompt(tokenizer, p) for p in prompts]
    for i, ids in enumerate(encoded):
        by_len[len(ids)].append(i)
    out: list[list[int]] = [[] for _ in prompts]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for members in by_len.values():
                for start in range(0, len(members), batch_size):
                    chunk = members[start : start + batch_size]
                    batch = torch.tensor([encoded[i] for i in chunk], dtype=torch.long)
                    for i, resp in zip(
                        chunk, _greedy_batch(model, batch, max_new_tokens, tokenizer.eos_id), strict=True
                    ):
                        out[i] = resp
    finally:
        model.train(was_training)
    return out


def evaluate_greedy(
    model: torch.nn.Module,
    tokenizer: TaskTokenizer,
    examples: Sequence[TaskExample],
    reward_fn: RewardFn,
    *,
    max_new_tokens: int,
    batch_size: int = 256,
) -> GreedyEvalResult:
    """Greedy accuracy overall and per data source. Raises if no response could be scored."""
    if not examples:
        raise ValueError("evaluate_greedy: expected at least one example, got 0")
    t0 = time.perf_counter()
    responses = greedy_decode(
        model, tokenizer, [e.prompt for e in examples], max_new_tokens=max_new_tokens, batch_size=batch_size
    )
    total = RewardStats()
    per_source: dict[str, RewardStats] = defaultdict(RewardStats)
    for ex, ids in zip(examples, responses, strict=True):
        scored = score_safely(reward_fn, tokenizer.decode(ids), ex)
        total.add(scored)
        per_source[ex.data_source].add(scored)
    if total.num_ok == 0:
        raise ValueError(
            f"evaluate_greedy: every reward call failed ({total.num_error}); last error: {total.last_error}"
        )
    by_source = {ds: s.mean_acc for ds, s in sorted(per_source.items()) if s.num_ok}
    return GreedyEvalResult(
        num_examples=len(examples),
        num_errors=total.num_error,
        accuracy=total.mean_acc,
        accuracy_by_source=by_source,
        mean_response_tokens=sum(map(len, responses)) / len(responses),
        wall_s=time.perf_counter() - t0,
    )
