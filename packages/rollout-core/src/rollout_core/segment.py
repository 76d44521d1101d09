"""Segment: what one engine call returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class StopReason(enum.StrEnum):
    STOP = "stop"  # a stop token (EOS) was generated; it is the last token
    LENGTH = "length"  # the call's max_new_tokens was reached
    ABORT = "abort"  # aborted (weight update, pause(abort), abort(request_id)); tokens so far are returned


@dataclass
class Segment:
    """The tokens of one engine call, with the log-prob and weight version of each.

    `routed_experts` are rows for input positions `routed_experts_start ..` of this call's context
    (prompt + generated), `[rows, num_layers, top_k]`, by the N-1 convention: a call with context length `C`
    that generated `G >= 1` tokens returns rows up to position `C+G-2`. It is None when the engine returned no
    routing (dense model, not requested, or an engine that drops routing on abort, like vLLM).
    `token_versions` is set when the call spanned a weight swap; otherwise every token has `weight_version`.
    """

    token_ids: list[int]
    log_probs: list[float]
    stop_reason: StopReason
    weight_version: int
    token_versions: list[int] | None = None
    routed_experts: Any = None
    routed_experts_start: int = 0
    num_preempted: int = 0
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stop_reason = StopReason(self.stop_reason)
        if len(self.log_probs) != len(self.token_ids):
            raise ValueError(
                f"Segment: expected one log-prob per token ({len(self.token_ids)}), got {len(self.log_probs)}"
            )
        if self.token_versions is not None and len(self.token_versions) != len(self.token_ids):
            raise ValueError(
                f"Segment: expected one version per token ({len(self.token_ids)}), got {len(self.token_versions)}"
            )
        if self.routed_experts_start < 0:
            raise ValueError(f"Segment.routed_experts_start: expected >= 0, got {self.routed_experts_start}")

    def versions(self) -> list[int]:
        """The weight version that sampled each token."""
        if self.token_versions is not None:
            return list(self.token_versions)
        return [self.weight_version] * len(self.token_ids)

    def row_versions(self, context_len: int, start: int, num_rows: int) -> list[int]:
        """Version of each returned row: row `p` came from the forward pass that sampled token `p+1`.

        Prefill rows (`p < context_len - 1`) were computed by the pass that sampled the first new token.
        """
        versions = self.versions()
        if not versions:
            raise ValueError("Segment.row_versions: a segment without tokens has no forward pass to attribute")
        return [versions[max(p + 1 - context_len, 0)] for p in range(start, start + num_rows)]


def drop_extra_last_row(seg: Segment, context_len: int) -> Segment:
    """Normalises an engine that returned `N` rows (the last token as an input too) to the N-1 convention.

    For adapters of engines with that behaviour (one SGLang release). A segment already at N-1 rows is returned
    unchanged; any other count raises ValueError.
    """
    g = len(seg.token_ids)
    if seg.routed_experts is None or g == 0:
        return seg
    n = len(seg.routed_experts)
    expected = context_len + g - 1 - seg.routed_experts_start
    if n == expected:
        return seg
    if n != expected + 1:
        raise ValueError(f"routing rows: expected {expected} (N-1) or {expected + 1} (N) rows, got {n}")
    seg.routed_experts = seg.routed_experts[:expected]
    return seg
