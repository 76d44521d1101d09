"""Request: one `generate` call as the engine tracks it, from submission to its Segment."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

import numpy as np
from rollout_core import SamplingParams, Segment, StopReason
from routing_state import RoutingSpec


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued: no slot yet (all busy, or the engine is paused)
    RUNNING = "running"  # owns a slot; decoded at every step
    FROZEN = "frozen"  # owns a slot and its KV cache, but is skipped until `resume()` (pause "keep")
    FINISHED = "finished"  # stopped on a stop token or on max_new_tokens
    ABORTED = "aborted"  # `abort`, `pause("abort")`, a cancelled caller or a failed step


@dataclass(eq=False)
class Request:
    """One engine call. Invariants, with `C = len(prompt_ids)` and `G = len(output_ids)`:

    - `token_versions[i]` is the weight version of the forward pass that sampled `output_ids[i]`;
    - `rows` hold the routing of input positions `rows_start .. C+G-2` (the N-1 convention): the prefill adds
      positions `0..C-1` (those `>= rows_start`), each decode step adds the position of its input token;
    - `slot` is set exactly while the status is RUNNING or FROZEN.
    """

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    seed: int
    stop_ids: frozenset[int]
    future: asyncio.Future[Segment]
    want_rows: bool
    status: RequestStatus = RequestStatus.WAITING
    slot: int | None = None
    output_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    token_versions: list[int] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)  # chunks of [rows, L_moe, K]
    stop_reason: StopReason | None = None

    @property
    def context_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_generated(self) -> int:
        return len(self.output_ids)

    @property
    def rows_start(self) -> int:
        return self.params.routed_experts_start

    @property
    def is_live(self) -> bool:
        return self.status in (RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.FROZEN)

    @property
    def has_slot(self) -> bool:
        return self.status in (RequestStatus.RUNNING, RequestStatus.FROZEN)

    def add_rows(self, first_position: int, rows: np.ndarray) -> None:
        """Keeps the rows of input positions `first_position ..` that are `>= rows_start`.  # rows [n, L, K]"""
        skip = max(self.rows_start - first_position, 0)
        if skip < len(rows):
            self.rows.append(rows[skip:])

    def add_token(self, token: int, log_prob: float, version: int) -> None:
        """Appends one sampled token and ends the request (FINISHED) on a stop token or the token budget."""
        self.output_ids.append(token)
        self.log_probs.append(log_prob)
        self.token_versions.append(version)
        if token in self.stop_ids:
            self.stop_reason = StopReason.STOP
        elif len(self.output_ids) >= self.params.max_new_tokens:
            self.stop_reason = StopReason.LENGTH
        if self.stop_reason is not None:
            self.status = RequestStatus.FINISHED

    def add_tokens(self, tokens: list[int], log_probs: list[float], version: int) -> None:
        """`add_token` for each of consecutive tokens; tokens after the one that ends the request are dropped."""
        budget = self.params.max_new_tokens - len(self.output_ids)
        cut = min(len(tokens), budget)
        for n, token in enumerate(tokens[:cut]):
            if token in self.stop_ids:
                cut = n + 1
                break
        if cut <= 0:
            return
        self.output_ids.extend(tokens[:cut])
        self.log_probs.extend(log_probs[:cut])
        self.token_versions.extend([version] * cut)
        if self.output_ids[-1] in self.stop_ids:
            self.stop_reason = StopReason.STOP
        elif len(self.output_ids) >= self.params.max_new_tokens:
            self.stop_reason = StopReason.LENGTH
        if self.stop_reason is not None:
            self.status = RequestStatus.FINISHED

    def segment(self, spec: RoutingSpec | None, current_version: int) -> Segment:
        """The Segment of this call so far (a finished call, or an aborted one with what it generated)."""
        versions = self.token_versions
        routed = None
        start = self.rows_start
        if spec is not None and self.want_rows and self.output_ids:
            last_row = self.context_len + self.num_generated - 2  # the last token was never an input
            start = min(start, last_row + 1)
            routed = np.concatenate(self.rows) if self.rows else np.zeros((0, *spec.row_shape), dtype=spec.dtype)
            expected = last_row + 1 - start
            if len(routed) != expected:
                raise RuntimeError(
                    f"request {self.request_id!r}: expected {expected} routing rows for positions "
                    f"{start}..{last_row}, got {len(routed)}"
                )
        return Segment(
            token_ids=list(self.output_ids),
            log_probs=list(self.log_probs),
            stop_reason=self.stop_reason if self.stop_reason is not None else StopReason.ABORT,
            weight_version=versions[0] if versions else current_version,
            token_versions=list(versions) if len(set(versions)) > 1 else None,
            routed_experts=routed,
            routed_experts_start=start,
        )
