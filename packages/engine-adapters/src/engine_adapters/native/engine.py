"""NativeEngine: an asyncio continuous-batching engine implementing `rollout_core.Engine`."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Callable
from typing import Literal

from moe_models import MoEForCausalLM, load_pretrained
from rollout_core import SamplingParams, Segment
from rollout_core.native_engine_config import EngineConfig, check_run_settings
from routing_state import RoutingSpec

from engine_adapters.native.burst import BurstChunk
from engine_adapters.native.metrics import EngineMetrics, MetricsRecorder
from engine_adapters.native.request import Request, RequestStatus
from engine_adapters.native.runner import ModelRunner, StepOutput, apply_chunk, apply_step, build_step_input
from engine_adapters.native.scheduler import SchedulePlan, Scheduler
from engine_adapters.native.step_thread import StepThread
from engine_adapters.native.weights import WeightSource, read_state

PauseMode = Literal["abort", "keep", "wait"]
PAUSE_MODES: tuple[str, ...] = ("abort", "keep", "wait")


class EngineBusyError(RuntimeError):
    """A weight update was attempted while requests were being served (pause the engine first)."""


class NativeEngine:
    """Continuous batching over a slot KV cache, with abort, pause ("abort" | "keep" | "wait") and weight pushes.

    Concurrency model: all bookkeeping runs on the event loop; each model step (prefill of newly admitted prompts
    plus one decode token for every running request) runs in the engine's step thread (`step_threads` torch
    threads; None: the process's count when the thread starts) under `torch.inference_mode()`, so the loop stays
    responsive. A background step-loop task starts on the running loop when there is work and exits when there is
    none; a new event loop (e.g.
    `asyncio.run` per test) is picked up automatically once the previous one is closed. Aborted calls return at
    once with the tokens and routing rows they have; a step that was running for them finishes in the background
    and its output for them is dropped.

    What the run decides is passed beside the config: `max_len` (positions per slot: prompt + max_new_tokens of
    one call must fit), `seed` (seeds the per-request seeds of calls that pass `SamplingParams.seed=None`),
    `true_on_policy` (every op batch-invariant, `moe_models.invariant_ops`, so the trainer's
    `token_log_probs(..., invariant=True)` reproduces the sampled log-probs and routing bit for bit),
    `num_threads` (torch intra-op threads, process-wide, set here; None: keep) and `step_threads`. `knobs` build
    the config when none is given.

    Pause modes (vLLM AsyncLLM's): "abort" ends every queued and in-flight call with `stop_reason=abort`; "keep"
    freezes in-flight calls with their KV cache, and after `resume()` they continue under the weights then loaded
    (their Segment carries per-token versions); "wait" lets in-flight calls finish. In every mode nothing is
    admitted until `resume()`: new calls queue. `pause` returns once no model step is running (and, for "wait",
    once the in-flight calls have finished), so `update_weights` can follow immediately.
    """

    def __init__(
        self,
        model: MoEForCausalLM,
        config: EngineConfig | None = None,
        *,
        max_len: int = 1024,
        seed: int = 0,
        true_on_policy: bool = False,
        num_threads: int | None = None,
        step_threads: int | None = 1,
        weight_version: int = 0,
        **knobs: object,
    ) -> None:
        if config is not None and knobs:
            raise ValueError(f"NativeEngine: expected either config or knobs, got both (knobs {sorted(knobs)})")
        self.config = config if config is not None else EngineConfig(**knobs)  # type: ignore[arg-type]
        check_run_settings(self.config, max_len, true_on_policy, num_threads, step_threads)
        self.max_len = max_len
        self._runner = ModelRunner(
            model,
            self.config,
            max_len=max_len,
            true_on_policy=true_on_policy,
            num_threads=num_threads,
            version=weight_version,
        )
        self._step_thread = StepThread(step_threads)  # runs every model step and weight load
        eos = self.config.eos_token_ids
        if eos is None:
            model_eos = model.config.eos_token_id
            eos = () if model_eos is None else tuple(model_eos) if isinstance(model_eos, list | tuple) else (model_eos,)
        self._eos_ids = frozenset(int(t) for t in eos)
        self._scheduler = Scheduler(self.config.slots, self.config.max_prefill_tokens)
        self._metrics = MetricsRecorder(self.config.slots)
        self._rng = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._in_step = False
        self._interrupt = threading.Event()  # set: the worker's decode burst ends after the step in progress

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        config: EngineConfig | None = None,
        *,
        vocab_size: int | None = None,
        **knobs: object,
    ) -> NativeEngine:
        """An engine over `moe_models.load_pretrained(path, vocab_size=vocab_size)` (an HF-format directory; it
        samples only the tokenizer's `vocab_size` ids when given)."""
        return cls(load_pretrained(path, vocab_size=vocab_size), config, **knobs)

    # ------------------------------------------------------------------ properties
    @property
    def weight_version(self) -> int:
        return self._runner.version

    @property
    def routing_spec(self) -> RoutingSpec | None:
        return self._runner.routing_spec

    @property
    def vocab_size(self) -> int:
        return self._runner.vocab_size

    @property
    def max_context(self) -> int:
        """Prompt + max_new_tokens one call may ask for."""
        return self.max_len

    @property
    def model(self) -> MoEForCausalLM:
        return self._runner.model

    @property
    def decode_compiled(self) -> bool:
        """Whether the decode step runs through the `torch.compile`d graph (`EngineConfig.compile_decode`)."""
        return self._runner.cached.compiled

    @property
    def is_paused(self) -> bool:
        return self._scheduler.paused

    def metrics(self) -> EngineMetrics:
        s = self._scheduler
        return self._metrics.snapshot(
            running=s.num_running,
            frozen=len(s.by_status(RequestStatus.FROZEN)),
            waiting=s.num_waiting,
            version=self.weight_version,
            paused=s.paused,
        )

    def request_status(self, request_id: str) -> RequestStatus | None:
        """The status of a live (waiting, running or frozen) call; None once it ended or if unknown."""
        request = self._scheduler.get(request_id)
        return None if request is None else request.status

    # ------------------------------------------------------------------ generation
    def _validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params: expected rollout_core.SamplingParams, got {type(params).__name__}")
        if len(prompt_ids) == 0:
            raise ValueError("prompt_ids: expected at least one token, got an empty prompt")
        bad = [t for t in prompt_ids if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise ValueError(f"prompt_ids: expected token ids in [0, {self.vocab_size}), got {bad[0]}")
        if len(prompt_ids) + params.max_new_tokens > self.max_len:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({params.max_new_tokens}) exceeds the "
                f"engine's context: expected <= max_len ({self.max_len})"
            )

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Segment:
        """Generates up to `params.max_new_tokens` tokens (see `rollout_core.Engine`); queues while paused."""
        loop = self._bind()
        self._validate(prompt_ids, params)
        seed = params.seed if params.seed is not None else self._rng.randrange(1 << 62)
        request = Request(
            request_id=request_id,
            prompt_ids=[int(t) for t in prompt_ids],
            params=params,
            seed=seed,
            stop_ids=(frozenset() if params.ignore_eos else self._eos_ids) | frozenset(params.stop_token_ids),
            future=loop.create_future(),
            want_rows=params.return_routed_experts and self.routing_spec is not None,
        )
        self._scheduler.add(request)
        self._interrupt.set()
        self._kick()
        try:
            return await request.future
        except asyncio.CancelledError:
            if request.is_live:
                self._end(request, RequestStatus.ABORTED)
            raise

    async def abort(self, request_id: str) -> bool:
        """Ends a queued, running or frozen call with `stop_reason=abort`; False for an unknown or ended id."""
        self._bind()
        request = self._scheduler.get(request_id)
        if request is None:
            return False
        self._end(request, RequestStatus.ABORTED)
        return True

    # ------------------------------------------------------------------ pause, resume, weights
    async def pause(self, mode: PauseMode = "abort") -> None:
        """Stops admitting calls; "abort" ends in-flight ones, "keep" freezes them, "wait" lets them finish.

        "abort" first freezes the running calls and lets the decode burst in progress end after its current step,
        so every token already computed is returned with its call (none is computed and then dropped)."""
        self._bind()
        if mode not in PAUSE_MODES:
            raise ValueError(f"pause mode: expected one of {PAUSE_MODES}, got {mode!r}")
        self._scheduler.paused = True
        self._interrupt.set()
        if mode in ("abort", "keep"):
            self._scheduler.freeze_running()
        self._kick()
        await self._wait_for(lambda: not self._in_step and (mode != "wait" or self._scheduler.num_running == 0))
        if mode == "abort":
            for request in list(self._scheduler.live.values()):
                self._end(request, RequestStatus.ABORTED)

    async def resume(self) -> None:
        """Admits queued calls again and continues frozen ones (under the weights loaded now)."""
        self._bind()
        self._scheduler.paused = False
        self._scheduler.thaw()
        self._interrupt.set()
        self._kick()

    async def update_weights(self, state: WeightSource, version: int) -> None:
        """Loads a full state dict (numpy arrays or floating torch tensors of any dtype, each cast to its
        parameter's dtype; or a safetensors file / HF directory) and serves `version`.

        Allowed while paused or idle; otherwise `EngineBusyError`. `version` must not go backwards.
        """
        self._bind()
        if not self.is_paused and (self._scheduler.live or self._in_step):
            raise EngineBusyError(
                f"update_weights: expected a paused or idle engine, got {len(self._scheduler.live)} live requests; "
                "call pause() first"
            )
        if isinstance(version, bool) or not isinstance(version, int) or version < self.weight_version:
            raise ValueError(f"update_weights: expected an int version >= {self.weight_version}, got {version!r}")
        loaded = await asyncio.to_thread(read_state, state)
        await self._step_thread.run(self._runner.load_weights, loaded, version)

    async def push(self, weights: WeightSource, version: int, mode: Literal["keep", "abort"]) -> None:
        """`rollout_core.RolloutEngine.push`: pauses (`keep` freezes the in-flight calls, `abort` ends them), loads
        `weights` in place as `version`, resumes (also when the load fails)."""
        await self.pause(mode)
        try:
            await self.update_weights(weights, version)
        finally:
            await self.resume()

    async def close(self) -> None:
        """Aborts every call and waits for the step in flight; the engine can be used again afterwards."""
        await self.pause("abort")
        self._scheduler.paused = False

    # ------------------------------------------------------------------ step loop
    def _bind(self) -> asyncio.AbstractEventLoop:
        """The running loop; switching loops is allowed once the previous one is closed (its calls are dropped)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return loop
        if self._loop is not None and not self._loop.is_closed() and self._scheduler.live:
            raise RuntimeError("NativeEngine: expected one event loop at a time, got calls from a second live loop")
        for request in list(self._scheduler.live.values()):
            self._scheduler.end(request, RequestStatus.ABORTED)
        self._interrupt.set()
        self._loop, self._task, self._waiters, self._in_step = loop, None, [], False
        return loop

    def _kick(self) -> None:
        if self._task is None and self._scheduler.has_runnable():
            assert self._loop is not None
            self._task = self._loop.create_task(self._step_loop())

    def _end(self, request: Request, status: RequestStatus) -> None:
        """Removes a request and resolves its caller with its Segment (or the error building it)."""
        if status == RequestStatus.ABORTED:
            self._interrupt.set()
        self._scheduler.end(request, status)
        if request.future.done():
            return
        try:
            request.future.set_result(request.segment(self.routing_spec, self.weight_version))
        except RuntimeError as exc:
            request.future.set_exception(exc)
        self._notify()

    def _notify(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters = []

    async def _wait_for(self, condition: Callable[[], bool]) -> None:
        while not condition():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def _apply(self, plan: SchedulePlan, outputs: list[StepOutput | BurstChunk]) -> None:
        """Applies a step's outputs in order (on the event loop) and resolves the calls that finished."""
        for out in outputs:
            if isinstance(out, StepOutput):
                self._metrics.record_step(len(plan.requests), sum(r.context_len for r in plan.prefill), out.seconds)
                touched = apply_step(plan, out)
            else:
                self._metrics.record_steps(out.new_steps, out.steps * len(out.rows), out.seconds)
                touched = apply_chunk(plan, out)
            for request in touched:
                if request.status == RequestStatus.FINISHED:
                    self._end(request, RequestStatus.FINISHED)
        self._notify()

    def _deliverer(self, plan: SchedulePlan) -> Callable[[list[StepOutput | BurstChunk]], None]:
        """Hands outputs from the worker thread to the loop, in order; dropped once that loop is closed (its calls
        were dropped with it)."""
        loop = self._loop
        assert loop is not None

        def deliver(outputs: list[StepOutput | BurstChunk]) -> None:
            try:
                loop.call_soon_threadsafe(self._apply, plan, outputs)
            except RuntimeError:
                if not loop.is_closed():
                    raise

        return deliver

    def _finishes_to_admit(self) -> int | None:
        """After planning: how many rows must finish before the burst ends to admit waiting calls (None: nobody
        waits; 0: a call waits with a slot free, left by the prefill budget, so only the step runs)."""
        waiting = 0 if self._scheduler.paused else self._scheduler.num_waiting
        if waiting == 0:
            return None
        if self._scheduler.num_free_slots > 0:
            return 0
        return min(waiting, self.config.admitted_together)

    async def _step_loop(self) -> None:
        try:
            while True:
                # a fresh flag per step, made before planning: whatever happens after the plan ends this burst
                self._interrupt = threading.Event()
                plan = self._scheduler.plan()
                if plan.empty:
                    return
                step = build_step_input(
                    plan,
                    self.config.decode_burst,
                    self._finishes_to_admit(),
                    self._interrupt,
                    self.config.step_delay_ms / 1000,
                )
                self._in_step = True
                try:
                    outputs = await self._step_thread.run(self._runner.execute, step, self._deliverer(plan))
                except Exception as exc:  # the step's calls fail with the model's error; the engine goes on
                    for request in plan.requests:
                        if request.is_live:
                            self._scheduler.end(request, RequestStatus.ABORTED)
                            if not request.future.done():
                                request.future.set_exception(exc)
                    continue
                finally:
                    self._in_step = False
                self._apply(plan, outputs)
        finally:
            self._interrupt.set()  # a burst left running by a cancelled loop stops after its step
            if self._task is asyncio.current_task():
                self._task = None
            self._notify()
