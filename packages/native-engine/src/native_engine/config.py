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
    # torch.compile moe_models' decode fast path (`MoEForCausalLM.compile_decode`: one graph, dynamic batch size
    # and key length). Measured on the shared 2-core CPU box (tiny preset, 1 thread): decoder stack 1.2x faster at
    # 64 rows and ~1.6x at 8 rows; with decode bursts, ~0-7% end to end on 64 equal rows and ~15% on the RL-shaped
    # batch of benchmarks/engine_throughput.py, for ~45 s of compiling (several graph variants: slot layouts,
    # masked or not) per model object. Not exact to the bit (~1e-7) and not paid once, so off by default.
    compile_decode: bool = False
    # Decode steps one worker-thread call may run (1: back to the event loop after every step). The worker stops
    # early, after the step in progress, on a new call, abort, pause or resume, and when a row finishes while a
    # call waits for a slot; it hands tokens to the loop every 8 steps and at every finish meanwhile. Results do
    # not depend on it (every row's math and draws are per step and per row).
    decode_burst: int = 64
    eos_token_ids: tuple[int, ...] | None = None  # None: the model config's eos_token_id; () never stops on EOS
    num_threads: int | None = None  # torch intra-op threads, PROCESS-WIDE (set when the engine is built); None: keep
    seed: int = 0  # seeds the per-request seeds of calls that pass `SamplingParams.seed=None`

    def __post_init__(self) -> None:
        for name in ("max_slots", "max_len", "max_prefill_tokens", "decode_burst"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"EngineConfig.{name}: expected an int >= 1, got {value!r}")
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise ValueError(f"EngineConfig.num_threads: expected None or an int >= 1, got {self.num_threads!r}")
        if self.cache_dtype not in _DTYPES:
            raise ValueError(f"EngineConfig.cache_dtype: expected one of {sorted(_DTYPES)}, got {self.cache_dtype!r}")
        if self.eos_token_ids is not None:
            object.__setattr__(self, "eos_token_ids", tuple(int(t) for t in self.eos_token_ids))

    @property
    def torch_cache_dtype(self) -> torch.dtype:
        return _DTYPES[self.cache_dtype]
