"""Greedy accuracy of a causal LM on task examples.

Prompts are encoded by the task's renderer (`rl_tasks.renderer`: by default the tokenizer's chat template); the
model must emit the answer then EOS. A `moe_models` model
decodes over a KV cache with the native engine's cached forward (`engine_adapters.native.decode.CachedModel`: no
scheduler, no sampling): contexts of any lengths decode together, each prefilled once at its own positions,
and each step feeds only the rows that have not emitted EOS, so the cost grows with the tokens generated, not
with the square of the longest response. Any other causal LM re-runs its plain forward per token over batches
of equal-length contexts (no padding, the same positions as at training time).
With a tool, each finished turn (its tokens, EOS included when emitted) is followed by the tool's observation as
the renderer's episode encodes it, and the next turn is decoded from there, up to the tool's `max_turns`; the last
turn gets no observation.
torch is imported lazily (the package's other modules stay torch-free).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rl_tasks.reward import RewardFn, RewardStats, score_safely
from rl_tasks.task import ToolEnv

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class GreedyEvalResult:
    """`accuracy` is the mean `acc` over responses whose reward scored ok; `num_errors` counts the rest.
    `mean_response_tokens` counts the tokens the model generated per example (EOS and observations excluded)."""

    num_examples: int
    num_errors: int
    accuracy: float
    accuracy_by_source: dict[str, float]
    mean_response_tokens: float
    wall_s: float


def _greedy_batch(
    model: torch.nn.Module, prompt_ids: torch.Tensor, max_new_tokens: int, eos_id: int
) -> list[list[int]]:
    """prompt_ids: [B, P] (no padding). Returns each row's generated ids up to and including its first EOS
    (all `max_new_tokens` of them when it emitted none)."""
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
        out.append(row[: row.index(eos_id) + 1] if eos_id in row else row)
    return out


def _greedy_chunk(
    model: torch.nn.Module, contexts: Sequence[list[int]], max_new_tokens: int, eos_id: int
) -> list[list[int]]:
    """Greedy continuations of `contexts` (any lengths) decoded together over a KV cache (the native engine's
    cached forward): each context is prefilled once, then each step feeds only the rows still running. Returns
    each row's generated ids up to and including its first EOS (all `max_new_tokens` when it emitted none)."""
    import torch

    from engine_adapters.native.decode import CachedModel, KVCache

    device = next(model.parameters()).device
    cached = CachedModel(model)  # type: ignore[arg-type]
    width = max(len(c) for c in contexts) + max_new_tokens
    cache = KVCache(model.config, num_slots=len(contexts), max_len=width, device=device)  # type: ignore[arg-type]
    flat = torch.tensor([t for c in contexts for t in c], dtype=torch.long, device=device)
    logits, _ = cached.forward(flat, torch.arange(len(contexts)), [len(c) for c in contexts], cache)  # [S, V]
    out: list[list[int]] = [[] for _ in contexts]
    active = list(range(len(contexts)))
    for step in range(max_new_tokens):
        still = []
        for row, token in zip(active, logits.argmax(dim=-1).tolist(), strict=True):
            out[row].append(int(token))
            if token != eos_id:
                still.append(row)
        active = still
        if not active or step == max_new_tokens - 1:
            break
        last = torch.tensor([out[r][-1] for r in active], dtype=torch.long, device=device)
        logits, _ = cached.forward(last, torch.tensor(active), [1] * len(active), cache)
    return out


def _cached_contexts(
    model: torch.nn.Module, contexts: Sequence[list[int]], *, max_new_tokens: int, eos_id: int, batch_size: int
) -> list[list[int]]:
    import torch

    out: list[list[int]] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(contexts), batch_size):
                out += _greedy_chunk(model, contexts[start : start + batch_size], max_new_tokens, eos_id)
    finally:
        model.train(was_training)
    return out


def _greedy_contexts(
    model: torch.nn.Module, contexts: Sequence[list[int]], *, max_new_tokens: int, eos_id: int, batch_size: int
) -> list[list[int]]:
    """Greedy continuation of each context (EOS included when emitted), in input order. A `moe_models` model
    decodes over a KV cache (`_greedy_chunk`); any other causal LM (`model(ids, mask).logits`) re-runs its
    uncached forward per token, over batches of equal-length contexts."""
    import torch

    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError(
            f"greedy_decode: expected max_new_tokens >= 1 and batch_size >= 1, got {max_new_tokens}, {batch_size}"
        )
    from moe_models import MoEForCausalLM

    if isinstance(model, MoEForCausalLM):
        return _cached_contexts(model, contexts, max_new_tokens=max_new_tokens, eos_id=eos_id, batch_size=batch_size)
    by_len: dict[int, list[int]] = defaultdict(list)
    for i, ids in enumerate(contexts):
        by_len[len(ids)].append(i)
    out: list[list[int]] = [[] for _ in contexts]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for members in by_len.values():
                for start in range(0, len(members), batch_size):
                    chunk = members[start : start + batch_size]
                    batch = torch.tensor([contexts[i] for i in chunk], dtype=torch.long)
                    for i, resp in zip(chunk, _greedy_batch(model, batch, max_new_tokens, eos_id), strict=True):
                        out[i] = resp
    finally:
        model.train(was_training)
    return out


def greedy_decode(
    model: torch.nn.Module,
    renderer: Renderer,
    examples: Sequence[TaskExample],
    *,
    max_new_tokens: int,
    batch_size: int = 256,
) -> list[list[int]]:
    """Greedy response ids (EOS excluded) for each example's prompt, in input order."""
    eos = renderer.tokenizer.eos_id
    contexts = [renderer.prompt_ids(ex) for ex in examples]
    responses = _greedy_contexts(model, contexts, max_new_tokens=max_new_tokens, eos_id=eos, batch_size=batch_size)
    return [ids[:-1] if ids and ids[-1] == eos else ids for ids in responses]


@dataclass(frozen=True)
class GreedyEpisode:
    """One greedy tool episode: `text` is every turn and observation in order (special tokens excluded),
    `model_tokens` the number of tokens the model generated (EOS excluded), `num_turns` its model turns."""

    text: str
    model_tokens: int
    num_turns: int


def greedy_episodes(
    model: torch.nn.Module,
    renderer: Renderer,
    examples: Sequence[TaskExample],
    tool: ToolEnv,
    *,
    max_new_tokens: int,
    batch_size: int = 256,
) -> list[GreedyEpisode]:
    """Greedy multi-turn episodes, in input order; `max_new_tokens` is each turn's budget."""
    tok = renderer.tokenizer
    special = {t for t in (tok.bos_id, tok.eos_id, tok.pad_id) if t is not None}
    episodes = [renderer.episode(ex) for ex in examples]
    contexts = [list(e.prompt_ids) for e in episodes]
    texts, tokens, turns = [""] * len(examples), [0] * len(examples), [0] * len(examples)
    active = list(range(len(examples)))
    for turn in range(tool.max_turns):
        generated = _greedy_contexts(
            model,
            [contexts[i] for i in active],
            max_new_tokens=max_new_tokens,
            eos_id=tok.eos_id,
            batch_size=batch_size,
        )
        still = []
        for i, ids in zip(active, generated, strict=True):
            body = [t for t in ids if t not in special]
            turn_text = tok.decode(body, skip_special_tokens=True)
            texts[i] += turn_text
            tokens[i] += len(body)
            turns[i] += 1
            observed = None if turn == tool.max_turns - 1 else tool.observation(examples[i], turn_text)
            if observed is not None:
                texts[i] += observed
                closed = bool(ids) and ids[-1] == tok.eos_id
                following = episodes[i].next_turn(turn_text, closed=closed, observation=observed)
                contexts[i] = [*contexts[i], *ids, *following]
                still.append(i)
        active = still
        if not active:
            break
    return [GreedyEpisode(t, n, k) for t, n, k in zip(texts, tokens, turns, strict=True)]


def evaluate_greedy(
    model: torch.nn.Module,
    renderer: Renderer,
    examples: Sequence[TaskExample],
    reward_fn: RewardFn,
    *,
    max_new_tokens: int,
    batch_size: int = 256,
    tool: ToolEnv | None = None,
) -> GreedyEvalResult:
    """Greedy accuracy overall and per data source (with `tool`: of whole greedy episodes, `max_new_tokens`
    per turn). Raises if no response could be scored."""
    if not examples:
        raise ValueError("evaluate_greedy: expected at least one example, got 0")
    t0 = time.perf_counter()
    if tool is None:
        ids = greedy_decode(model, renderer, examples, max_new_tokens=max_new_tokens, batch_size=batch_size)
        texts = [renderer.tokenizer.decode(r, skip_special_tokens=True) for r in ids]
        lengths = [len(r) for r in ids]
    else:
        episodes = greedy_episodes(
            model, renderer, examples, tool, max_new_tokens=max_new_tokens, batch_size=batch_size
        )
        texts, lengths = [e.text for e in episodes], [e.model_tokens for e in episodes]
    total = RewardStats()
    per_source: dict[str, RewardStats] = defaultdict(RewardStats)
    for ex, text in zip(examples, texts, strict=True):
        scored = score_safely(reward_fn, text, ex)
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
        mean_response_tokens=sum(lengths) / len(lengths),
        wall_s=time.perf_counter() - t0,
    )
