"""DecodeBurst: the decode steps a worker thread runs after a step's first token, before going back to the loop.

A thread hop per token (asyncio.to_thread, then per-request bookkeeping on the event loop) costs about as much as a
small model's decode step, so the worker keeps decoding the step's rows by itself while nothing needs the loop:
no new call, abort, pause or resume (`interrupt`, checked after every step, so those are served within one
step). Rows that finish (a stop token or their token budget) are handed to the loop at once (`deliver`), in a
chunk of just those rows (the loop's per-row work holds the GIL the worker needs, so it should scale with what
finished), while the rest go on; when calls wait for a slot, the burst ends once `finishes_to_stop` rows have
finished since the step began, so the loop admits the waiting calls and prefills them together (one prefill per
several finishes, not one per finish: a prefill call costs about a decode step of a small model, a free slot
only 1/slots of one).
Tokens also go to the loop every `progress_steps` steps (applied there while the worker goes on), so callers and
`metrics()` see progress at a fine grain.

Every row's math is that of a one-step-per-hop engine: the same forward pass per step and the same counter-based
draw (seed, token index), so tokens, log-probs and routing rows do not depend on how steps are grouped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch

from engine_adapters.native.sampler import PreparedSampling, SamplingBatch, prepare, sample_prepared, uniform_rows

DecodeFn = Callable[[torch.Tensor, torch.Tensor, bool], tuple[torch.Tensor, torch.Tensor | None]]


@dataclass
class BurstSpec:
    """How far the worker may keep decoding a step's rows (all lists and tensors in the plan's row order, [S]).

    remaining[i]: tokens row i may still sample after the step's token (its max_new_tokens - generated - 1).
    stop_ids: [S, M] int64 stop tokens of each row, padded with -1 (M may be 0).
    """

    max_steps: int  # extra steps after the step's own, >= 0
    remaining: list[int]
    stop_ids: torch.Tensor
    slots: torch.Tensor  # [S] int64, each row's slot
    capture: bool  # capture routing rows (some row wants them)
    progress_steps: int  # hand tokens to the loop at least every this many steps (progress stays visible)
    finishes_to_stop: int | None  # end after this many rows finished (counting the step's own token); None: never
    interrupt: threading.Event
    step_delay_s: float = 0.0  # wait after each burst step (cut short by `interrupt`): a throttled engine


@dataclass
class BurstChunk:
    """`steps` consecutive decode steps, right after the step's token (or the rows' previous chunk), for some of the
    step's rows. Each decode step and its time are counted once, by the first chunk handed over after it
    (`new_steps`, `seconds`), whichever rows that chunk holds."""

    rows: list[int]  # [R] indices into the plan's requests
    tokens: list[list[int]]  # [R][steps]
    log_probs: list[list[float]]  # [R][steps]
    routing: np.ndarray | None  # [R, steps, L_moe, K]: the routing of each step's input token
    version: int
    steps: int
    new_steps: int  # decode steps not counted by an earlier chunk
    seconds: float  # their wall time


@dataclass
class _Rows:
    """The rows still decoding, sorted by slot (a contiguous slot range keeps attention on cache views)."""

    index: list[int]  # plan row of each
    remaining: list[int]  # tokens each may still sample
    ids: torch.Tensor  # [R] the next input token of each
    slots: torch.Tensor  # [R]
    sampling: SamplingBatch  # counters: those of the burst's first step
    stop_ids: torch.Tensor  # [R, M]
    uniforms: torch.Tensor  # [R, T] float64: each row's draw for burst steps 0 .. T-1 (counter-based, see sampler)
    prepared: PreparedSampling
    step: int = 0  # burst steps done

    @staticmethod
    def build(
        index: list[int],
        remaining: list[int],
        ids: torch.Tensor,
        slots: torch.Tensor,
        sampling: SamplingBatch,
        stop_ids: torch.Tensor,
        steps: int,
    ) -> _Rows:
        """Rows whose next token has counter `sampling.counter`; draws are made for `steps` steps ahead."""
        counters = sampling.counter[:, None] + torch.arange(steps)  # [R, T]
        uniforms = uniform_rows(sampling.seed[:, None], counters)
        return _Rows(index, remaining, ids, slots, sampling, stop_ids, uniforms, prepare(sampling))

    def select(self, keep: list[int]) -> _Rows:
        """The rows at positions `keep`."""
        pick = torch.tensor(keep, dtype=torch.int64)
        sampling = _select_sampling(self.sampling, pick)
        return _Rows(
            index=[self.index[j] for j in keep],
            remaining=[self.remaining[j] for j in keep],
            ids=self.ids.index_select(0, pick),
            slots=self.slots.index_select(0, pick),
            sampling=sampling,
            stop_ids=self.stop_ids.index_select(0, pick),
            uniforms=self.uniforms.index_select(0, pick),
            prepared=prepare(sampling),
            step=self.step,
        )

    def sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's tokens and log-probs (exactly `sampler.sample` with each row's counter)."""
        out = sample_prepared(logits, self.prepared, self.uniforms[:, self.step])
        self.step += 1
        return out

    def advance(self, tokens: torch.Tensor, steps: int) -> None:
        """`tokens` [R] are the next inputs; `steps` burst steps ran since the budgets were last charged."""
        self.ids = tokens
        if steps:
            self.remaining = [left - steps for left in self.remaining]


def _select_sampling(s: SamplingBatch, pick: torch.Tensor) -> SamplingBatch:
    return SamplingBatch(*(getattr(s, f.name).index_select(0, pick) for f in fields(SamplingBatch)))


def _finished(tokens: torch.Tensor, rows: _Rows, steps: int) -> list[int]:
    """Positions (in `rows`) of rows done after `steps` burst steps: budget spent or a stop token drawn."""
    done = {j for j, left in enumerate(rows.remaining) if left <= steps}
    if rows.stop_ids.shape[1]:
        hit = (tokens[:, None] == rows.stop_ids).any(dim=1)
        if bool(hit.any()):
            done.update(hit.nonzero().view(-1).tolist())
    return sorted(done)


@dataclass
class _Pending:
    """What the burst sampled and has not handed over, for the current rows (in `_Rows` order): blocks of
    [R, t] tokens and log-probs and [R, t, L_moe, K] routing (none when not captured), `steps` = sum of t; plus the
    decode steps and seconds no chunk has counted yet."""

    tokens: list[torch.Tensor] = field(default_factory=list)
    lps: list[torch.Tensor] = field(default_factory=list)
    routing: list[torch.Tensor] = field(default_factory=list)
    steps: int = 0
    uncounted: int = 0
    since: float = field(default_factory=time.perf_counter)

    def add(self, tok: torch.Tensor, lp: torch.Tensor, routed: torch.Tensor | None) -> None:
        self.tokens.append(tok[:, None])
        self.lps.append(lp[:, None])
        if routed is not None:
            self.routing.append(routed[:, None])
        self.steps += 1
        self.uncounted += 1

    def hand_over(self, rows: _Rows, pick: list[int] | None, version: int, dtype: np.dtype | None) -> BurstChunk:
        """A chunk of the rows at positions `pick` (None: all), which leave the pending set; the rest stay."""
        tokens, lps = torch.cat(self.tokens, 1), torch.cat(self.lps, 1)
        routing = torch.cat(self.routing, 1) if self.routing else None
        index = rows.index
        if pick is not None:
            gone = set(pick)
            keep = torch.tensor([j for j in range(len(rows.index)) if j not in gone], dtype=torch.int64)
            self.tokens, self.lps = [tokens.index_select(0, keep)], [lps.index_select(0, keep)]
            self.routing = [] if routing is None else [routing.index_select(0, keep)]
            chosen = torch.tensor(pick, dtype=torch.int64)
            tokens, lps = tokens.index_select(0, chosen), lps.index_select(0, chosen)
            routing = None if routing is None else routing.index_select(0, chosen)
            index = [rows.index[j] for j in pick]
        now = time.perf_counter()
        chunk = BurstChunk(
            rows=list(index),
            tokens=tokens.tolist(),
            log_probs=lps.tolist(),
            routing=None if routing is None or dtype is None else routing.numpy().astype(dtype),
            version=version,
            steps=tokens.shape[1],
            new_steps=self.uncounted,
            seconds=now - self.since,
        )
        self.uncounted, self.since = 0, now
        if pick is None:
            self.tokens, self.lps, self.routing, self.steps = [], [], [], 0
        return chunk


def _stops(spec: BurstSpec, finished: int) -> bool:
    return spec.finishes_to_stop is not None and finished >= spec.finishes_to_stop


def _start(spec: BurstSpec, first_tokens: torch.Tensor, sampling: SamplingBatch) -> _Rows | None:
    """The rows that go on after the step's tokens, or None when the burst ends with the step."""
    first = first_tokens.tolist()
    alive = [i for i in range(len(first)) if spec.remaining[i] > 0 and first[i] not in spec.stop_ids[i].tolist()]
    if not alive or spec.max_steps == 0 or spec.interrupt.is_set() or _stops(spec, len(first) - len(alive)):
        return None
    slots = spec.slots.tolist()
    alive.sort(key=lambda i: slots[i])
    pick = torch.tensor(alive, dtype=torch.int64)
    picked = _select_sampling(sampling, pick)
    return _Rows.build(
        index=alive,
        remaining=[spec.remaining[i] for i in alive],
        ids=first_tokens.index_select(0, pick),
        slots=spec.slots.index_select(0, pick),
        sampling=replace(picked, counter=picked.counter + 1),  # the burst's first token is each row's next one
        stop_ids=spec.stop_ids.index_select(0, pick),
        steps=spec.max_steps,
    )


def run_burst(
    decode: DecodeFn,
    spec: BurstSpec,
    first_tokens: torch.Tensor,
    sampling: SamplingBatch,
    version: int,
    rows_dtype: np.dtype | None,
    deliver: Callable[[list[BurstChunk]], None],
) -> list[BurstChunk]:
    """Decodes on after the step's tokens `first_tokens` [S] (plan order; `sampling` is the step's, so its
    counters are those of `first_tokens`). Chunks handed over early went through `deliver`, in order; the
    returned ones come after them."""
    rows = _start(spec, first_tokens, sampling)
    if rows is None:
        return []
    finished = len(first_tokens) - len(rows.index)  # rows done with the step's own token
    pending = _Pending()
    since_advance = 0  # steps since the rows' budgets were last charged
    for step in range(1, spec.max_steps + 1):
        logits, routed = decode(rows.ids, rows.slots, spec.capture)
        tok, lp = rows.sample(logits)
        pending.add(tok, lp, routed)
        since_advance += 1
        done = _finished(tok, rows, since_advance)
        finished += len(done)
        if spec.step_delay_s > 0:
            spec.interrupt.wait(spec.step_delay_s)
        last = step == spec.max_steps or spec.interrupt.is_set() or len(done) == len(rows.index)
        if last or _stops(spec, finished):
            break
        if done or pending.steps >= spec.progress_steps:
            progress = pending.steps >= spec.progress_steps
            deliver([pending.hand_over(rows, None if progress else done, version, rows_dtype)])
            rows.advance(tok, since_advance)
            since_advance = 0
            if done:
                gone = set(done)
                rows = rows.select([j for j in range(len(rows.index)) if j not in gone])
        else:
            rows.advance(tok, 0)
    return [pending.hand_over(rows, None, version, rows_dtype)]
