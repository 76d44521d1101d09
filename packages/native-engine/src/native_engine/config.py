"""EngineConfig: the knobs of one NativeEngine."""

from __future__ import annotations

from dataclasses import dataclass

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class EngineConfig:
    """Capacity, batching and compilation knobs of a `NativeEngine`.

    Memory is bounded by construction: the KV cache holds `max_slots` sequences of at most `max_len` positions
    each, and every running request owns one slot for its whole life (so requests are never preempted; a request
    that finds no free slot waits in the queue).
    """

    max_slots: int = 64  # sequences decoded together (KV cache slots)
    max_len: int = 1024  # positions per slot: prompt + max_new_tokens of one call must fit
    max_prefill_tokens: int = 8192  # prompt tokens admitted per step (at least one prompt always is)
    cache_dtype: str = "float32"  # KV cache dtype: float32, bfloat16 or float16
    device: str = "cpu"
    # Run the decode step through `native_engine.decode.decode_graph` compiled by torch.compile (see
    # `native_engine.decode.CachedModel`): one graph per model shape and cache length per process, compiled at the
    # first decode step (seconds of inductor work, paid once per process). Throughput: benchmarks/engine_throughput.py,
    # numbers in docs/benchmarks.md. Same results as eager to float rounding (~1e-7 in fp32). Off by default: the
    # compile does not pay off in short runs and tests.
    compile_decode: bool = False
    # Threads of the compiled step's C kernels (attention and routed experts; fp32 weights and cache; see
    # `native_engine.decode.attention_kernel`, `.expert_kernel`): the calling thread plus kernel_threads - 1
    # helpers. Attention is bound by memory latency on one core, so a second thread nearly halves it.
    kernel_threads: int = 2
    # Decode steps one worker-thread call may run (1: back to the event loop after every step). The worker stops
    # early, after the step in progress, on a new call, abort, pause or resume, and once `admission_batch` rows
    # finished while calls wait for a slot; it hands tokens to the loop every 16 steps and at every finish
    # meanwhile. Results do not depend on it (every row's math and draws are per step and per row).
    decode_burst: int = 64
    # With calls waiting for a slot, a burst ends (and they are admitted and prefilled together) once this many
    # rows have finished, or as many as wait if fewer. None: max_slots // 8, at least 1. 1 admits at every finish
    # (lowest latency); larger amortises the prefill call and the thread hop over several admissions at the cost
    # of slots left idle meanwhile (benchmarks/engine_throughput.py (b) measures both). Results do not depend on it.
    admission_batch: int | None = None
    eos_token_ids: tuple[int, ...] | None = None  # None: the model config's eos_token_id; () never stops on EOS
    num_threads: int | None = None  # torch intra-op threads, PROCESS-WIDE (set when the engine is built); None: keep
    # Torch intra-op threads of the engine's own step thread (`native_engine.step_thread`: model steps and weight
    # loads), whatever the process's count; None: the process's when the thread starts. 1: the compiled step's C
    # kernels run threads of their own (kernel_threads), and the eager step's ops are too small to gain from a
    # second OpenMP thread: with a trainer in the same process, a second thread here makes both the decode and the
    # trainer's step slower (they spin against each other; see `native_engine.step_thread`). Results do not depend
    # on it beyond float rounding.
    step_threads: int | None = 1
    seed: int = 0  # seeds the per-request seeds of calls that pass `SamplingParams.seed=None`
    # A throttled engine: the worker waits this long after each step of a decode burst (a pause, abort or new call
    # cuts the wait short), as a slower model would take. For tests and demos that need weight pushes to land
    # mid-response on a tiny model. Results do not depend on it. 0: no wait.
    step_delay_ms: float = 0.0
    # True on-policy mode: every position is computed alone with `moe_models.invariant_step` (no batching, no fused
    # kernels), so the trainer's `invariant_log_probs` reproduces the sampled log-probs and routing bit for bit.
    # fp32 only, never compiled; many times slower than the batched decode.
    true_on_policy: bool = False

    def __post_init__(self) -> None:
        ints = ("max_slots", "max_len", "max_prefill_tokens", "decode_burst", "admission_batch", "kernel_threads")
        for name in ints:
            value = getattr(self, name)
            if name == "admission_batch" and value is None:
                object.__setattr__(self, name, max(1, self.max_slots // 8))
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"EngineConfig.{name}: expected an int >= 1, got {value!r}")
        for name in ("num_threads", "step_threads"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"EngineConfig.{name}: expected None or an int >= 1, got {value!r}")
        if (
            isinstance(self.step_delay_ms, bool)
            or not isinstance(self.step_delay_ms, int | float)
            or not (0 <= self.step_delay_ms <= 10_000)
        ):
            raise ValueError(f"EngineConfig.step_delay_ms: expected a number in 0..10000, got {self.step_delay_ms!r}")
        if self.cache_dtype not in _DTYPES:
            raise ValueError(f"EngineConfig.cache_dtype: expected one of {sorted(_DTYPES)}, got {self.cache_dtype!r}")
        if self.true_on_policy and (self.compile_decode or self.cache_dtype != "float32"):
            raise ValueError(
                "EngineConfig.true_on_policy: expected compile_decode False and cache_dtype float32 (the invariant "
                f"forward is fp32 and eager), got {self.compile_decode}, {self.cache_dtype}"
            )
        if self.eos_token_ids is not None:
            object.__setattr__(self, "eos_token_ids", tuple(int(t) for t in self.eos_token_ids))

    @property
    def torch_cache_dtype(self) -> torch.dtype:
        return _DTYPES[self.cache_dtype]
