"""TeacherScores: what a teacher says about one sampled response, aligned with the student's log-prob shift.

Row `j` is the teacher's next-token distribution after `prompt + response[:j]`, the one response token `j` was
sampled from: on the trainer's shifted grid (entry `t` scores token `t + 1`) it is entry `P - 1 + j` for a prompt
of `P` tokens. Invariants, checked at construction:
- `sampled[j]` is the teacher's log-prob of response token `j` itself, in a slot of its own, so it exists whether or
  not that token is among the teacher's top-k;
- `ids[j]`, `logprobs[j]` are the teacher's `K` most likely tokens there (descending), `K` may be 0;
- `valid[j, k]` is False where the teacher had fewer than `K` tokens to offer (a vocabulary smaller than K);
- `in_top_k[j]` says whether response token `j` is among the valid top-k ids (all False when `K` is 0): a
  top-k-only loss must skip, and count, the rows where it is False; it never drops them silently;
- all log-probs are at the teacher's temperature, which must be the student's training temperature.
Arrays are numpy (float32 / int64 / bool), so a record crosses Ray's object store without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TeacherScores"]


@dataclass(frozen=True)
class TeacherScores:
    sampled: np.ndarray  # [R] float32: log pi_T(response token j | context before it)
    ids: np.ndarray  # [R, K] int64: the teacher's top-k token ids per row, most likely first
    logprobs: np.ndarray  # [R, K] float32: their log-probs
    valid: np.ndarray  # [R, K] bool
    in_top_k: np.ndarray  # [R] bool
    temperature: float

    def __post_init__(self) -> None:
        r = self.sampled.shape[0] if self.sampled.ndim == 1 else -1
        if r < 0:
            raise ValueError(f"TeacherScores.sampled: expected shape [R], got {self.sampled.shape}")
        k_shape = self.ids.shape
        if len(k_shape) != 2 or k_shape[0] != r:
            raise ValueError(f"TeacherScores.ids: expected shape [{r}, K], got {k_shape}")
        for name in ("logprobs", "valid"):
            got = getattr(self, name).shape
            if got != k_shape:
                raise ValueError(f"TeacherScores.{name}: expected shape {k_shape} (as ids), got {got}")
        if self.in_top_k.shape != (r,):
            raise ValueError(f"TeacherScores.in_top_k: expected shape ({r},), got {self.in_top_k.shape}")
        if not self.temperature > 0:
            raise ValueError(f"TeacherScores.temperature: expected > 0, got {self.temperature}")
        if r and not np.isfinite(self.sampled).all():
            raise ValueError("TeacherScores.sampled: expected finite log-probs, got a non-finite one")

    @property
    def num_rows(self) -> int:
        return int(self.sampled.shape[0])

    @property
    def top_k(self) -> int:
        return int(self.ids.shape[1])

    @property
    def top_k_mass(self) -> np.ndarray:  # [R] float32
        """The teacher's probability mass on its valid top-k ids per row (0 when K is 0)."""
        return np.where(self.valid, np.exp(self.logprobs), 0.0).sum(axis=1).astype(np.float32)
