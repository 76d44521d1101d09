"""TeacherScorer: the native engine's scoring call. For sampled responses, one no-grad prefill per batch gives the
model's log-prob of every response token and, when asked, its top-k ids and log-probs per position
(`rollout_core.TeacherScores`, in the student's shift).

The scorer owns a frozen model and nothing else: no KV cache (a prefill of the whole sequence scores it), no
weight updates. Its context is the model's `max_position_embeddings`: a sequence longer than that is refused,
never truncated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from moe_models import MoEForCausalLM, load_pretrained
from rollout_core.teacher_scores import TeacherScores

__all__ = ["ScoreRequest", "TeacherScorer"]


@dataclass(frozen=True)
class ScoreRequest:
    """One response to score: `prompt_ids` (at least one token) then `response_ids`."""

    prompt_ids: Sequence[int]
    response_ids: Sequence[int]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


class TeacherScorer:
    """`score(requests)` in batches of at most `batch_tokens` padded tokens. `temperature` scales the logits before
    the log-softmax (the student's training temperature); `top_k` >= 0 top entries per row (0: sampled slot only)."""

    def __init__(self, model: MoEForCausalLM, *, temperature: float, top_k: int = 0, batch_tokens: int = 4096) -> None:
        vocab = model.config.logit_vocab_size
        if not temperature > 0:
            raise ValueError(f"TeacherScorer: expected temperature > 0, got {temperature}")
        if not 0 <= top_k <= vocab:
            raise ValueError(f"TeacherScorer.top_k: expected 0..{vocab} (the teacher's vocabulary), got {top_k}")
        if batch_tokens < 1:
            raise ValueError(f"TeacherScorer.batch_tokens: expected >= 1, got {batch_tokens}")
        self.model = model.eval().requires_grad_(False)
        self.temperature, self.top_k, self.batch_tokens = float(temperature), int(top_k), int(batch_tokens)

    @classmethod
    def load(
        cls,
        checkpoint_dir: str | Path,
        *,
        temperature: float,
        top_k: int = 0,
        batch_tokens: int = 4096,
        vocab_size: int | None = None,
    ) -> TeacherScorer:
        """`vocab_size`: the tokenizer's ids, the only ones scored (None: every embedding row)."""
        model = load_pretrained(checkpoint_dir, vocab_size=vocab_size)
        return cls(model, temperature=temperature, top_k=top_k, batch_tokens=batch_tokens)

    @property
    def vocab_size(self) -> int:
        """The ids it scores (the tokenizer's)."""
        return int(self.model.config.logit_vocab_size)

    @property
    def max_tokens(self) -> int:
        """The longest sequence (prompt + response) this teacher can score."""
        return int(self.model.config.max_position_embeddings)

    def score(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        """One TeacherScores per request, in order."""
        for i, r in enumerate(requests):
            if not r.prompt_ids:
                raise ValueError(f"TeacherScorer.score: request {i}: expected at least one prompt token, got none")
            if r.num_tokens > self.max_tokens:
                raise ValueError(
                    f"TeacherScorer.score: request {i}: prompt + response is {r.num_tokens} tokens, expected at most "
                    f"the teacher's context of {self.max_tokens}"
                )
            bad = [t for t in (*r.prompt_ids, *r.response_ids) if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(
                    f"TeacherScorer.score: request {i}: token ids {bad[:5]} outside the teacher's "
                    f"vocabulary of {self.vocab_size}"
                )
        out: list[TeacherScores | None] = [None] * len(requests)
        for rows in self._batches(requests):
            for i, scores in zip(rows, self._score_batch([requests[i] for i in rows]), strict=True):
                out[i] = scores
        return [s for s in out if s is not None]

    def _batches(self, requests: Sequence[ScoreRequest]) -> list[list[int]]:
        """Rows grouped by length so that each batch's padded size stays within `batch_tokens` (a longer
        sequence goes alone)."""
        order = sorted(range(len(requests)), key=lambda i: requests[i].num_tokens)
        batches: list[list[int]] = []
        for i in order:
            width = requests[i].num_tokens
            if batches and width * (len(batches[-1]) + 1) <= self.batch_tokens:
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    @torch.no_grad()
    def _score_batch(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        """The responses' rows only, the head a chunk of rows at a time (`MoEForCausalLM.token_log_probs_at`):
        no `[rows, length, vocab]` tensor."""
        width = max(r.num_tokens for r in requests)
        device = self.model.lm_head.weight.device
        ids = torch.zeros((len(requests), width), dtype=torch.int64)
        mask = torch.zeros((len(requests), width), dtype=torch.int64)
        for b, r in enumerate(requests):
            seq = [*r.prompt_ids, *r.response_ids]
            ids[b, : len(seq)] = torch.tensor(seq, dtype=torch.int64)
            mask[b, : len(seq)] = 1
        first = torch.tensor([len(r.prompt_ids) - 1 for r in requests], dtype=torch.int64)
        scores = self.model.token_log_probs_at(
            ids.to(device), mask.to(device), None, temperature=self.temperature, logits_from=first.to(device),
            top_k=self.top_k,
        )  # fmt: skip
        sampled = scores.log_probs.cpu()  # [B, T-1]: row t scores token t + 1
        top = None if scores.top_ids is None else (scores.top_ids.cpu(), scores.top_log_probs.cpu())  # type: ignore[union-attr]
        return [self._one(sampled[b], top, b, ids[b], r) for b, r in enumerate(requests)]

    def _one(
        self,
        sampled: torch.Tensor,
        top: tuple[torch.Tensor, torch.Tensor] | None,
        b: int,
        ids: torch.Tensor,
        r: ScoreRequest,
    ) -> TeacherScores:
        p, n = len(r.prompt_ids), r.num_tokens
        targets = ids[p:n]
        rows = slice(p - 1, n - 1)
        top_ids = top[0][b, rows] if top is not None else torch.zeros((len(targets), 0), dtype=torch.int64)
        top_lp = top[1][b, rows] if top is not None else torch.zeros((len(targets), 0))
        return TeacherScores(
            sampled=sampled[rows].numpy().astype(np.float32),
            ids=top_ids.numpy().astype(np.int64),
            logprobs=top_lp.numpy().astype(np.float32),
            valid=np.ones(tuple(top_ids.shape), dtype=bool),
            in_top_k=(top_ids == targets[:, None]).any(dim=-1).numpy(),
            temperature=self.temperature,
        )
