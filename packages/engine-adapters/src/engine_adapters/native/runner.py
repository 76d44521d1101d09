"""ModelRunner: the model, its cached forward (`decode.CachedModel`, which holds the decode state), its slot KV
cache and the weight version; runs one step (forward + sampling).

`execute` and `load_weights` run on the engine's step thread (`engine_adapters.native.step_thread`; torch releases the
GIL) and are serialised by one lock as well, so a weight push never overlaps a forward pass, even one left running by
an event loop that was closed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from moe_models import MoEForCausalLM, load_state_dict_tensors
from rollout_core.native_engine_config import EngineConfig, usable_cores
from routing_state import RoutingSpec

from engine_adapters.native.burst import BurstChunk, BurstSpec, run_burst
from engine_adapters.native.decode import CachedModel, KVCache
from engine_adapters.native.request import Request
from engine_adapters.native.sampler import SamplingBatch, sample
from engine_adapters.native.scheduler import SchedulePlan
from engine_adapters.native.shared_prompts import SharedPrompts


@dataclass
class StepInput:
    """Tensors of one step, built on the event loop from a plan (the worker thread never reads a Request)."""

    prefill_ids: torch.Tensor  # [Np] int64, the prompts of admitted requests concatenated
    prefill_slots: torch.Tensor  # [Sp] int64
    prefill_lens: list[int]  # [Sp], sum Np
    prefill_capture: bool
    decode_ids: torch.Tensor  # [Sd] int64, the last token of each running request
    decode_slots: torch.Tensor  # [Sd] int64
    decode_capture: bool
    sampling: SamplingBatch  # [Sp + Sd] rows: prefill rows first
    burst: BurstSpec  # how far the worker may decode on after this step's token


@dataclass
class StepOutput:
    """The step's own token for each of its rows (plan order)."""

    tokens: list[int]  # [Sp + Sd]
    log_probs: list[float]  # [Sp + Sd]
    version: int  # the weight version the step ran under
    prefill_rows: np.ndarray | None  # [Np, L_moe, K] routing of every prompt position
    decode_rows: np.ndarray | None  # [Sd, L_moe, K] routing of each decode input
    seconds: float


PROGRESS_STEPS = 16  # a burst hands its tokens to the event loop at least this often


def _burst_spec(
    plan: SchedulePlan, max_steps: int, finishes_to_stop: int | None, interrupt: threading.Event, step_delay_s: float
) -> BurstSpec:
    rows = plan.requests
    width = max((len(r.stop_ids) for r in rows), default=0)
    stop_ids = torch.full((len(rows), width), -1, dtype=torch.int64)
    for i, r in enumerate(rows):
        if r.stop_ids:
            stop_ids[i, : len(r.stop_ids)] = torch.tensor(sorted(r.stop_ids), dtype=torch.int64)
    return BurstSpec(
        max_steps=max_steps,
        remaining=[r.params.max_new_tokens - r.num_generated - 1 for r in rows],
        stop_ids=stop_ids,
        slots=torch.tensor([r.slot for r in rows], dtype=torch.int64),
        capture=any(r.want_rows for r in rows),
        progress_steps=PROGRESS_STEPS,
        finishes_to_stop=finishes_to_stop,
        interrupt=interrupt,
        step_delay_s=step_delay_s,
    )


def build_step_input(
    plan: SchedulePlan,
    max_burst: int = 1,
    finishes_to_stop: int | None = 1,
    interrupt: threading.Event | None = None,
    step_delay_s: float = 0.0,
) -> StepInput:
    """Packs a plan: admitted prompts for prefill, running requests' last tokens for decode; the worker may run up
    to `max_burst` steps in all, ending early once `finishes_to_stop` rows finished, and waits `step_delay_s`
    after each of its burst steps (see `engine_adapters.native.burst`)."""
    rows = plan.requests
    prefill_ids = [t for r in plan.prefill for t in r.prompt_ids]
    return StepInput(
        prefill_ids=torch.tensor(prefill_ids, dtype=torch.int64),
        prefill_slots=torch.tensor([r.slot for r in plan.prefill], dtype=torch.int64),
        prefill_lens=[r.context_len for r in plan.prefill],
        prefill_capture=any(r.want_rows for r in plan.prefill),
        decode_ids=torch.tensor([r.output_ids[-1] for r in plan.decode], dtype=torch.int64),
        decode_slots=torch.tensor([r.slot for r in plan.decode], dtype=torch.int64),
        decode_capture=any(r.want_rows for r in plan.decode),
        burst=_burst_spec(
            plan,
            max_burst - 1,
            finishes_to_stop,
            interrupt if interrupt is not None else threading.Event(),
            step_delay_s,
        ),
        sampling=SamplingBatch(
            temperature=torch.tensor([r.params.temperature for r in rows], dtype=torch.float32),
            top_p=torch.tensor([r.params.top_p for r in rows], dtype=torch.float32),
            top_k=torch.tensor([r.params.top_k for r in rows], dtype=torch.int64),
            seed=torch.tensor([r.seed for r in rows], dtype=torch.int64),
            counter=torch.tensor([r.num_generated for r in rows], dtype=torch.int64),
        ),
    )


Deliver = Callable[[list["StepOutput | BurstChunk"]], None]


def routing_spec_of(model: MoEForCausalLM) -> RoutingSpec | None:
    cfg = model.config
    if cfg.num_moe_layers == 0:
        return None
    return RoutingSpec(
        num_layers=cfg.num_moe_layers,
        top_k=cfg.num_experts_per_tok,
        num_experts=cfg.num_experts,
        layers=cfg.moe_layer_ids,
    )


class ModelRunner:
    """Owns the model, its `CachedModel` (decode weights, compiled graph inputs, kernel threads) and the KV cache
    (`slots` x `max_len` positions). The model itself holds no inference state."""

    def __init__(
        self,
        model: MoEForCausalLM,
        config: EngineConfig,
        *,
        max_len: int,
        true_on_policy: bool = False,
        num_threads: int | None = None,
        version: int = 0,
    ) -> None:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.model = model.eval().to(config.device)
        self.config = config
        self.version = version
        self.routing_spec = routing_spec_of(model)
        self.vocab_size = int(model.config.vocab_size)
        cache_dtype = getattr(torch, config.dtype)
        self.cache = KVCache(model.config, config.slots, max_len, dtype=cache_dtype, device=config.device)
        self._lock = threading.Lock()
        self.cached = CachedModel(
            self.model,
            compiled=config.compile_decode,
            kernel_threads=config.kernel_threads or usable_cores(),
            invariant=true_on_policy,
        )

    def _rows(self, routed: torch.Tensor | None) -> np.ndarray | None:
        if routed is None or self.routing_spec is None:
            return None
        return routed.cpu().numpy().astype(self.routing_spec.dtype, copy=False)

    def _decode(
        self, ids: torch.Tensor, slots: torch.Tensor, capture: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One decode token for each of the rows `ids` [R] in `slots` [R]: (logits [R, V], routing or None)."""
        return self.cached.forward(
            ids, slots, [1] * len(ids), self.cache, capture_routing=capture and self.routing_spec is not None
        )

    def _prefill(self, step: StepInput) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Resets the admitted slots and prefills each distinct prompt once, copying its keys and values to the
        slots of its repeats (`SharedPrompts`): (last-token logits [S, V], routing of every prompt token or None)."""
        for slot in step.prefill_slots.tolist():
            self.cache.reset(slot)
        capture = step.prefill_capture and self.routing_spec is not None
        shared = SharedPrompts.of(step.prefill_ids, step.prefill_lens)
        if not shared.repeats:
            return self.cached.forward(
                step.prefill_ids, step.prefill_slots, step.prefill_lens, self.cache, capture_routing=capture
            )
        out, routed = self.cached.forward(
            *shared.unique_chunks(step.prefill_ids, step.prefill_slots), self.cache, capture_routing=capture
        )
        self.cache.copy_prefixes(shared.copies(step.prefill_slots))
        return shared.expand_logits(out), None if routed is None else shared.expand_rows(routed)

    def execute(self, step: StepInput, deliver: Deliver) -> list[StepOutput | BurstChunk]:
        """Prefills the admitted prompts (resetting their slots), decodes the running rows, samples each row; then
        decodes on as `step.burst` allows. Outputs handed over early went through `deliver`, in order; the
        returned ones come after them."""
        t0 = time.perf_counter()
        with self._lock, torch.inference_mode():
            logits: list[torch.Tensor] = []
            prefill_rows = decode_rows = None
            if step.prefill_lens:
                out, routed = self._prefill(step)
                logits.append(out)
                prefill_rows = self._rows(routed)
            if len(step.decode_ids):
                out, routed = self._decode(step.decode_ids, step.decode_slots, step.decode_capture)
                logits.append(out)
                decode_rows = self._rows(routed)
            tokens, log_probs = sample(torch.cat(logits), step.sampling)
            version = self.version
            first = StepOutput(
                tokens=tokens.tolist(),
                log_probs=log_probs.tolist(),
                version=version,
                prefill_rows=prefill_rows,
                decode_rows=decode_rows,
                seconds=time.perf_counter() - t0,
            )
            pending: list[StepOutput | BurstChunk] = [first]

            def hand_over(chunks: list[BurstChunk]) -> None:
                deliver([*pending, *chunks])
                pending.clear()

            dtype = None if self.routing_spec is None else np.dtype(self.routing_spec.dtype)
            rest = run_burst(self._decode, step.burst, tokens, step.sampling, version, dtype, hand_over)
        return [*pending, *rest]

    def load_weights(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Copies a full state dict (either key layout, any floating dtype) into the model's parameters in place,
        each cast to its parameter's dtype (the compiled decode graph stays valid; the decode weights rebuild)."""
        with self._lock, torch.no_grad():
            load_state_dict_tensors(self.model, state)
            self.version = version


def apply_chunk(plan: SchedulePlan, chunk: BurstChunk) -> list[Request]:
    """Appends a burst chunk's tokens and routing rows to its requests; returns those that got tokens (some may now
    be FINISHED). Requests that ended while the burst ran are skipped: their output is dropped."""
    touched: list[Request] = []
    for j, i in enumerate(chunk.rows):
        req = plan.requests[i]
        if not req.has_slot:
            continue
        if chunk.routing is not None and req.want_rows:
            req.add_rows(req.context_len + req.num_generated - 1, chunk.routing[j])
        req.add_tokens(chunk.tokens[j], chunk.log_probs[j], chunk.version)
        touched.append(req)
    return touched


def apply_step(plan: SchedulePlan, out: StepOutput) -> list[Request]:
    """Appends each row's token and routing rows to its request and returns the requests that got a token (some
    may now be FINISHED). Requests that ended while the step ran (aborted) are skipped: their output is dropped."""
    touched: list[Request] = []
    offset = 0
    for i, req in enumerate(plan.requests):
        if i < len(plan.prefill):
            n = req.context_len
            chunk = out.prefill_rows[offset : offset + n] if out.prefill_rows is not None else None
            first_position = 0
            offset += n
        else:
            j = i - len(plan.prefill)
            chunk = out.decode_rows[j : j + 1] if out.decode_rows is not None else None
            first_position = req.context_len + req.num_generated - 1
        if not req.has_slot:
            continue
        if chunk is not None and req.want_rows:
            req.add_rows(first_position, chunk)
        req.add_token(out.tokens[i], out.log_probs[i], out.version)
        touched.append(req)
    return touched
