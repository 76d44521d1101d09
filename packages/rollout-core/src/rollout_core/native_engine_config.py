"""EngineConfig: the knobs of one NativeEngine, which is also the `rollout.engine` section of kind `native` (the
apps' command line reads it as it is). Standard library only (`--help` imports it).

What the run decides rather than the user (the context length, the seed, true on-policy mode, threads) is passed
to `NativeEngine` beside the config, not kept in it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rollout_core.config_fields import help_field
from rollout_core.engine_registry import ROLLOUT_ENGINES, open_registered

if TYPE_CHECKING:
    from rollout_core import RolloutEngine, RolloutSite

DTYPES = ("float32", "bfloat16")


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one, as Linux does; else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_run_settings(
    config: EngineConfig, max_len: int, true_on_policy: bool, num_threads: int | None, step_threads: int | None
) -> None:
    """ValueError unless the run's settings of a `NativeEngine` fit: `max_len` (positions per slot: prompt +
    max_new_tokens of one call) >= 1; `num_threads` (torch intra-op threads, process-wide, set when the engine is
    built) and `step_threads` (those of the engine's step thread) None or >= 1; true on-policy mode (batch-invariant
    ops, `moe_models.invariant_ops`) fp32 and eager."""
    if not _positive_int(max_len):
        raise ValueError(f"NativeEngine.max_len: expected an int >= 1, got {max_len!r}")
    for name, value in (("num_threads", num_threads), ("step_threads", step_threads)):
        if value is not None and not _positive_int(value):
            raise ValueError(f"NativeEngine.{name}: expected None or an int >= 1, got {value!r}")
    if true_on_policy and (config.compile_decode or config.dtype != "float32"):
        raise ValueError(
            "NativeEngine.true_on_policy: expected compile_decode False and dtype float32 (the invariant forward is "
            f"fp32 and eager), got {config.compile_decode}, {config.dtype}"
        )


COMPILED_DECODE_FAMILIES = ("qwen3_moe", "qwen2_moe", "mixtral")  # decode_step_unsupported's, without torch


@dataclass
class EngineConfig:
    """Capacity, batching and compilation knobs of a `NativeEngine`.

    Memory is bounded by construction: the KV cache holds `slots` sequences of at most the engine's `max_len`
    positions each, and every running request owns one slot for its whole life (so requests are never preempted;
    a request that finds no free slot waits in the queue). `decode_burst`, `admission_batch` and `step_delay_ms`
    change when tokens are handed over, never the tokens: every row's math and draws are per step and per row.
    """

    kind: Literal["native"] = "native"
    slots: int = help_field("KV-cache slots (sequences decoded together)", 64)
    dtype: Literal["float32", "bfloat16"] = help_field(
        "the KV cache's dtype; the rollout engine loads the weights in it too (the trainer keeps fp32 weights and "
        "sends them in this dtype; the compiled decode's C kernels are fp32-only, so a compiled bf16 step runs "
        "torch's ops)",
        "float32",
    )
    max_prefill_tokens: int = help_field("prompt tokens admitted per step (at least one prompt always is)", 8192)
    device: str = help_field("torch device of the model and its KV cache", "cpu")
    compile_decode: bool = help_field(
        "torch.compile the decode step (`engine_adapters.native.decode.decode_graph`, one graph per model shape and "
        "cache length, compiled at the first decode step): same results as eager to float rounding; pays off with "
        "long responses, not in short runs",
        False,
    )
    kernel_threads: int = help_field(
        "threads of the compiled decode's C kernels (attention, routed experts; fp32 only): the calling thread plus "
        "helpers; 0: the cores the engine may use (an async rollouter's ray.rollouter_threads, else every core this "
        "process may run on)",
        2,
    )
    decode_burst: int = help_field(
        "decode steps one worker-thread call may run (1: back to the event loop after every step); a burst ends "
        "early on a new call, abort, pause or resume, and once admission_batch rows finished while calls wait",
        64,
    )
    admission_batch: int | None = help_field(
        "with calls waiting for a slot, a burst ends once this many rows finished (or as many as wait); 1 admits at "
        "every finish, more amortise the prefill over several admissions; none: slots // 8, at least 1",
        None,
    )
    eos_token_ids: tuple[int, ...] | None = help_field(
        "token ids that end a response (none: the model config's eos_token_id; empty: never stop on EOS)", None
    )
    step_delay_ms: float = help_field(
        "throttle: the engine waits this long after each decode step, as a slower model would (tests and demos of "
        "weight pushes landing mid-response on a tiny model); 0: none",
        0.0,
    )

    def __post_init__(self) -> None:
        for name in ("slots", "max_prefill_tokens", "decode_burst"):
            if not _positive_int(getattr(self, name)):
                raise ValueError(f"rollout.engine.{name}: expected an int >= 1, got {getattr(self, name)!r}")
        if not (_positive_int(self.kernel_threads) or self.kernel_threads == 0) or isinstance(
            self.kernel_threads, bool
        ):
            raise ValueError(f"rollout.engine.kernel_threads: expected an int >= 0, got {self.kernel_threads!r}")
        if self.admission_batch is not None and not _positive_int(self.admission_batch):
            raise ValueError(
                f"rollout.engine.admission_batch: expected none or an int >= 1, got {self.admission_batch!r}"
            )
        delay = self.step_delay_ms
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= 10_000:
            raise ValueError(f"rollout.engine.step_delay_ms: expected a number in 0..10000, got {delay!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"rollout.engine.dtype: expected one of {list(DTYPES)}, got {self.dtype!r}")
        if self.eos_token_ids is not None:
            self.eos_token_ids = tuple(int(t) for t in self.eos_token_ids)

    def unsupported_family(self, family: str) -> str:
        """Why this engine cannot serve a model of `family`, or "": it serves every family, but its compiled decode
        step computes only GQA without sinks and bias-free SwiGLU experts (`decode.decode_step_unsupported`, which
        also refuses a sliding window when the model is built)."""
        if self.compile_decode and family not in COMPILED_DECODE_FAMILIES:
            return (
                f"rollout.engine.compile_decode: the compiled decode step serves {list(COMPILED_DECODE_FAMILIES)}, "
                f"got a {family} model"
            )
        return ""

    def unsupported_checkpoint(self, checkpoint_dir: str) -> str:
        """`unsupported_family` of the checkpoint's family (its config.json `model_type`)."""
        data = json.loads((Path(checkpoint_dir) / "config.json").read_text())
        return self.unsupported_family(str(data.get("model_type")))

    @property
    def admitted_together(self) -> int:
        """`admission_batch`, or (None) `slots // 8`, at least 1."""
        return self.admission_batch if self.admission_batch is not None else max(1, self.slots // 8)

    async def build(self, site: RolloutSite) -> RolloutEngine:
        """A `NativeEngine` over `site`'s checkpoint (`kernel_threads` 0: `site.threads()`), the rollout engine
        engine-adapters registers as kind `native`."""
        return await open_registered(ROLLOUT_ENGINES, self, site)
