"""ScriptedEngine: a deterministic in-memory TEST DOUBLE of an inference engine (not a model, not an engine).

It exists to test the resume loop, the agent loop and the engine contract without torch. Its outputs are
arithmetic, chosen so that a test can read provenance back from the data itself:
- routing row of input position `p`, made by a forward pass under weight version `v`: every layer's slot 0 is
  `p % E`, slot 1 is `v % E` (see `decode_row`);
- the log-prob of a token sampled under version `v` is `-(v + 1) - (token % 10) / 10` (see `decode_version`).
It can abort calls on command (`abort`, `abort_all`, `bump_version(abort_inflight=True)`) or at seeded random
points, bump its weight version mid-call (like vLLM's pause "keep"), return routing only for calls that finish
(like vLLM), follow a deterministic script of `events` (at global token step `i`: "bump" the version, "abort"
the running call, or "bump_abort" both, as a weight sync does), and return `num_tokens` rows instead of
`num_tokens - 1` (like one SGLang release).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import numpy as np
from routing_state import RoutingSpec

from rollout_core.params import SamplingParams
from rollout_core.request_checks import check_prompt
from rollout_core.segment import Segment, StopReason

DEFAULT_SPEC = RoutingSpec(num_layers=2, top_k=2, num_experts=256)


@dataclass
class CallRecord:
    """One `generate` call as the engine saw it (for assertions in tests)."""

    request_id: str
    context_len: int
    routed_experts_start: int
    num_tokens: int = 0
    num_preempted: int = 0
    stop_reason: StopReason | None = None


@dataclass
class _Running:
    record: CallRecord
    abort_requested: bool = False
    rows: list[np.ndarray] = field(default_factory=list)


def decode_row(row: np.ndarray) -> tuple[int, int]:
    """(position % E, version % E) encoded in a ScriptedEngine routing row `[num_layers, top_k]`."""
    return int(row[0, 0]), int(row[0, 1]) if row.shape[1] > 1 else -1


def decode_version(log_prob: float) -> int:
    """The weight version encoded in a ScriptedEngine log-prob."""
    return int(-log_prob + 1e-9) - 1


class ScriptedEngine:
    """Implements `rollout_core.Engine` with scripted outputs. See the module docstring."""

    def __init__(
        self,
        *,
        routing_spec: RoutingSpec | None = DEFAULT_SPEC,
        vocab_size: int = 512,
        seed: int = 0,
        token_delay: float = 0.0,
        abort_prob: float = 0.0,
        stop_prob: float = 0.0,
        preempt_prob: float = 0.0,
        eos_token_id: int = 1,
        routing_on_abort: bool = True,
        full_rows: bool = False,
        honor_routed_experts_start: bool = True,
        max_context: int = 4096,
        events: dict[int, str] | None = None,
    ) -> None:
        self._spec = routing_spec
        self.vocab_size = vocab_size
        self.token_delay = token_delay
        self.abort_prob = abort_prob
        self.stop_prob = stop_prob
        self.preempt_prob = preempt_prob
        self.eos_token_id = eos_token_id
        self.routing_on_abort = routing_on_abort
        self.full_rows = full_rows
        self.honor_routed_experts_start = honor_routed_experts_start
        self.max_context = max_context
        self._rng = random.Random(seed)
        self._version = 0
        self.events = dict(events or {})  # global token step -> "bump" | "abort" | "bump_abort"
        self.steps = 0
        self.running: dict[str, _Running] = {}
        self.calls: list[CallRecord] = []

    @property
    def weight_version(self) -> int:
        return self._version

    @property
    def routing_spec(self) -> RoutingSpec | None:
        return self._spec

    # ------------------------------------------------------------------ control
    async def abort(self, request_id: str) -> bool:
        run = self.running.get(request_id)
        if run is None:
            return False
        run.abort_requested = True
        return True

    def abort_all(self) -> int:
        for run in self.running.values():
            run.abort_requested = True
        return len(self.running)

    def bump_version(self, *, abort_inflight: bool = False) -> int:
        """New weights: in-flight calls continue under them (pause "keep") unless `abort_inflight`."""
        if abort_inflight:
            self.abort_all()
        self._version += 1
        return self._version

    # ------------------------------------------------------------------ generation
    def _row(self, position: int, version: int) -> np.ndarray:
        assert self._spec is not None
        e, layers, k = self._spec.num_experts, self._spec.num_layers, self._spec.top_k
        row = np.empty((layers, k), dtype=np.int64)
        for layer in range(layers):
            for slot in range(k):
                row[layer, slot] = (position + version + layer + slot) % e
            row[layer, 0] = position % e
            if k > 1:
                row[layer, 1] = version % e
        return row

    def _token(self, seed: int, context: list[int]) -> int:
        return (seed * 7919 + len(context) * 104729 + context[-1] * 31 + 17) % self.vocab_size

    def _validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        check_prompt(prompt_ids, params, vocab_size=self.vocab_size, max_context=self.max_context)

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Segment:
        self._validate(prompt_ids, params)
        if request_id in self.running:
            raise ValueError(f"request_id {request_id!r} is already running")
        record = CallRecord(request_id, len(prompt_ids), params.routed_experts_start)
        self.calls.append(record)
        run = self.running[request_id] = _Running(record)
        try:
            return await self._decode(run, list(prompt_ids), params)
        finally:
            del self.running[request_id]

    async def _decode(self, run: _Running, context: list[int], params: SamplingParams) -> Segment:
        c = len(context)
        tokens: list[int] = []
        log_probs: list[float] = []
        versions: list[int] = []
        preempted = 0
        reason = StopReason.LENGTH
        if params.temperature == 0.0:
            seed = 0  # greedy: a function of the context alone
        else:
            seed = params.seed if params.seed is not None else self._rng.randrange(1 << 30)
        while len(tokens) < params.max_new_tokens:
            await asyncio.sleep(self.token_delay)
            self.steps += 1
            event = self.events.get(self.steps, "")
            if event.startswith("bump"):
                self._version += 1
            if event.endswith("abort"):
                run.abort_requested = True
            if run.abort_requested or (self.abort_prob and self._rng.random() < self.abort_prob):
                reason = StopReason.ABORT
                break
            if self.preempt_prob and self._rng.random() < self.preempt_prob:
                preempted += 1
            v = self._version
            if self._spec is not None:  # this pass computes rows for its inputs (all of them for prefill)
                first = c - 1 + len(tokens) if tokens else 0
                run.rows.extend(self._row(p, v) for p in range(first, c + len(tokens)))
            stop = bool(self.stop_prob) and self._rng.random() < self.stop_prob
            tok = self.eos_token_id if stop else self._token(seed, context + tokens)
            tokens.append(tok)
            log_probs.append(-(v + 1) - (tok % 10) / 10)
            versions.append(v)
            if (tok == self.eos_token_id and not params.ignore_eos) or tok in params.stop_token_ids:
                reason = StopReason.STOP
                break
        run.record.num_tokens, run.record.stop_reason = len(tokens), reason
        run.record.num_preempted = preempted
        return Segment(
            token_ids=tokens,
            log_probs=log_probs,
            stop_reason=reason,
            weight_version=versions[0] if versions else self._version,
            token_versions=versions if len(set(versions)) > 1 else None,
            num_preempted=preempted,
            **self._routing(run, c, tokens, params, reason),
        )

    def _routing(
        self, run: _Running, c: int, tokens: list[int], params: SamplingParams, reason: StopReason
    ) -> dict[str, object]:
        if self._spec is None or not params.return_routed_experts or not tokens:
            return {}
        if reason == StopReason.ABORT and not self.routing_on_abort:
            return {}
        rows = run.rows
        if self.full_rows:  # the last token as an input too: one row too many (an adapter must drop it)
            rows = [*rows, self._row(c + len(tokens) - 1, self._version)]
        start = params.routed_experts_start if self.honor_routed_experts_start else 0
        start = min(start, len(rows))
        return {
            "routed_experts": np.stack(rows[start:])
            if rows[start:]
            else np.zeros((0, *self._spec.row_shape), dtype=np.int64),
            "routed_experts_start": start,
        }
